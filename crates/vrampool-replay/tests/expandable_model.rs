//! The model of PyTorch's expandable segments against PyTorch itself: snapshots recorded under
//! `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` (PyTorch 2.11 on an NVIDIA H100: ResNet-50 training and
//! BERT serving with random batch and length, as `scripts/pytorch-e2e.py` runs them) hold both the requests
//! and the segments PyTorch mapped for them; replayed through the model, the requests map the same pages.

use std::path::PathBuf;

use vrampool_replay::{ComparisonRow, ReplayPlan};

fn recorded(name: &str) -> vrampool_trace::Trace {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name);
    vrampool_trace::read_trace(&path, &Default::default()).unwrap()
}

#[test]
fn the_model_maps_what_expandable_segments_mapped() {
    for (name, peak_mib) in [("resnet_train_expandable.pickle.gz", 5716), ("bert_serve_expandable.pickle.gz", 948)] {
        let trace = recorded(name);
        let pytorch = ComparisonRow::pytorch(&trace).expect("the snapshot records its segment maps");
        let model = ComparisonRow::expandable(&ReplayPlan::from_trace(&trace).unwrap());
        assert_eq!(pytorch.peak_reserved_bytes, peak_mib << 20, "{name}: what PyTorch reported");
        assert_eq!(model.peak_reserved_bytes, pytorch.peak_reserved_bytes, "{name}");
        assert_eq!(model.backend_calls, pytorch.backend_calls, "{name}: one map per growth of a segment");
        assert_eq!(model.peak_live_bytes, pytorch.peak_live_bytes, "{name}");
    }
}
