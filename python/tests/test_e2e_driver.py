"""The parts of scripts/pytorch-e2e.py that need no GPU: each mode's environment, configs for the GPU, and the
summary table built from run records."""

import argparse
import contextlib
import importlib.util
import io
import json
import pathlib
import tempfile
import unittest

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "pytorch-e2e.py"
spec = importlib.util.spec_from_file_location("pytorch_e2e", SCRIPT)
e2e = importlib.util.module_from_spec(spec)
spec.loader.exec_module(e2e)


class Environment(unittest.TestCase):
    def test_each_mode_sets_its_variables_and_clears_the_others(self):
        base = {"PATH": "/bin", "PYTORCH_CUDA_ALLOC_CONF": "stale", "VRAMPOOL_CONF": "stale"}
        self.assertEqual(e2e.apply_environment(base, "pytorch", None), {"PATH": "/bin", "VRAMPOOL_CONF": "stale"})
        self.assertEqual(
            e2e.apply_environment(base, "expandable", None)["PYTORCH_CUDA_ALLOC_CONF"], "expandable_segments:True"
        )
        self.assertEqual(
            e2e.apply_environment(base, "cudamallocasync", None)["PYTORCH_CUDA_ALLOC_CONF"], "backend:cudaMallocAsync"
        )
        nocache = e2e.apply_environment(base, "nocache", None)
        self.assertEqual(nocache["PYTORCH_NO_CUDA_MEMORY_CACHING"], "1")
        self.assertNotIn("PYTORCH_CUDA_ALLOC_CONF", nocache)
        self.assertNotIn("VRAMPOOL_CONF", e2e.apply_environment(base, "vrampool", None), "the default config")
        advised = e2e.apply_environment(base, "vrampool-advised", "strategy=dynamic")
        self.assertEqual(advised["VRAMPOOL_CONF"], "strategy=dynamic")
        self.assertNotIn("PYTORCH_CUDA_ALLOC_CONF", advised)
        self.assertEqual(set(e2e.MODE_ENVIRONMENT), set(e2e.MODES))

    def test_configs_from_replays_lose_their_simulated_backend(self):
        self.assertEqual(e2e.device_conf("strategy=hybrid,backend=sim,coverage=0.95"), "strategy=hybrid,coverage=0.95")
        self.assertEqual(e2e.device_conf("strategy=dynamic, backend=host"), "strategy=dynamic")
        self.assertEqual(e2e.device_conf("strategy=fixed,backend=cuda"), "strategy=fixed,backend=cuda")


class Workloads(unittest.TestCase):
    def test_every_workload_has_a_runner_and_the_more_ones_are_run_by_name_only(self):
        self.assertEqual(set(e2e.RUNNERS), set(e2e.ALL_WORKLOADS))
        self.assertEqual(len(e2e.ALL_WORKLOADS), len(set(e2e.ALL_WORKLOADS)))
        self.assertTrue(set(e2e.TRAINING) <= set(e2e.ALL_WORKLOADS))
        self.assertEqual(e2e.parse_args(["drive", "--out", "x"]).workloads, list(e2e.WORKLOADS))
        chosen = e2e.parse_args(["drive", "--out", "x", "--workloads", "moe_train_routing,resnet_infer"])
        self.assertEqual(chosen.workloads, ["moe_train_routing", "resnet_infer"])
        with contextlib.redirect_stderr(io.StringIO()), self.assertRaises(SystemExit):
            e2e.parse_args(["drive", "--out", "x", "--workloads", "no_such_workload"])

    def test_a_run_may_write_its_snapshot(self):
        args = e2e.parse_args(["run", "--workload", "unet_train_randres", "--mode", "vrampool", "--snapshot", "s.gz"])
        self.assertEqual((args.workload, args.snapshot), ("unet_train_randres", "s.gz"))
        self.assertIsNone(e2e.parse_args(["run", "--workload", "resnet_infer", "--mode", "pytorch"]).snapshot)


def reported(out, runs):
    """The report's table (pytorch-e2e.md) of `runs`, written as the drive writes them to `out`."""
    (out / "runs.jsonl").write_text("".join(json.dumps(run) + "\n" for run in runs))
    with contextlib.redirect_stdout(io.StringIO()):
        e2e.report(out)
    return (out / "pytorch-e2e.md").read_text()


def record(workload, mode, wall, rep, losses=None, tokens=None, digest=None, role="measure", ok=True):
    run = {"workload": workload, "mode": mode, "ok": ok, "rep": rep, "role": role}
    if ok:
        run.update(wall_s=wall, peak_reserved_bytes=1000 * e2e.MIB, peak_allocated_bytes=900 * e2e.MIB)
        run.update(driver_used_bytes_end=1500 * e2e.MIB, gpu="GPU", torch="2")
    else:
        run["error"] = "exit status 1"
    if losses is not None:
        run["losses"] = losses
    if tokens is not None:
        run.update(generated_tokens=tokens, tokens_sha256=digest)
    return run


class Plan(unittest.TestCase):
    def test_rounds_rotate_the_modes_after_a_warm_up_run_and_pytorch_runs_again_for_its_spread(self):
        plan = e2e.plan_runs(["gpt_train_varlen"], ["vrampool", "pytorch", "expandable"], 3, 1, set(), 1)
        self.assertEqual(plan[0], ("gpt_train_varlen", "vrampool", -1, "warmup"))
        rounds = [[mode for (_, mode, rep, role) in plan if rep == r and role == "measure"] for r in range(3)]
        self.assertEqual(
            rounds,
            [["vrampool", "pytorch", "expandable"], ["pytorch", "expandable", "vrampool"],
             ["expandable", "vrampool", "pytorch"]],
        )
        self.assertEqual(plan[-1], ("gpt_train_varlen", "pytorch", 3, "spread"))
        self.assertEqual(len(plan), 1 + 9 + 1)

    def test_advised_runs_only_where_a_config_was_given_and_warm_up_can_be_left_out(self):
        plan = e2e.plan_runs(["resnet_train_fixed", "gpt_serve"], ["vrampool-advised", "pytorch"], 2, 0,
                             {"gpt_serve"}, 0)
        self.assertNotIn("warmup", [role for (*_, role) in plan])
        self.assertNotIn(("resnet_train_fixed", "vrampool-advised"), [(w, m) for (w, m, _, _) in plan])
        self.assertEqual(sum(1 for (w, m, _, _) in plan if (w, m) == ("gpt_serve", "vrampool-advised")), 2)


class Summary(unittest.TestCase):
    def test_rows_take_medians_and_compare_losses_with_pytorchs_own_spread(self):
        runs = [
            record("resnet_train_fixed", "pytorch", 2.0, 0, losses=[7.0, 6.5]),
            record("resnet_train_fixed", "pytorch", 4.0, 1, losses=[7.0, 6.6]),
            record("resnet_train_fixed", "pytorch", 3.0, 2, losses=[7.0, 6.5]),
            record("resnet_train_fixed", "pytorch", 9.0, 3, losses=[7.0, 6.5001], role="spread"),
            record("resnet_train_fixed", "vrampool", 1.0, 0, losses=[7.0, 6.52]),
            record("resnet_train_fixed", "vrampool", 1.5, 1, losses=[7.0, 6.5]),
            record("resnet_train_fixed", "expandable", 2.0, 0, losses=[7.0, 6.8]),
            record("resnet_train_fixed", "nocache", None, 0, ok=False),
            record("gpt_serve", "pytorch", 5.0, 0, tokens=[64, 128], digest="a"),
            record("gpt_serve", "vrampool", 5.0, 0, tokens=[64, 128], digest="a"),
            record("gpt_serve", "vrampool", 5.0, 1, tokens=[64, 128], digest="b"),
        ]
        rows = {(row["workload"], row["mode"]): row for row in e2e.summarize(runs)}
        pytorch = rows[("resnet_train_fixed", "pytorch")]
        self.assertEqual(pytorch["wall_s_median"], 3.0, "the spread runs are not timed")
        self.assertAlmostEqual(pytorch["max_loss_difference_vs_pytorch_run_1"], 0.1)
        mine = rows[("resnet_train_fixed", "vrampool")]
        self.assertEqual(mine["wall_s_median"], 1.25)
        self.assertAlmostEqual(mine["wall_vs_pytorch"], 1.25 / 3.0)
        self.assertAlmostEqual(mine["max_loss_difference_vs_pytorch_run_1"], 0.02)
        # PyTorch's runs differ by up to 0.1 between themselves; the median of its second step is 6.50005.
        self.assertAlmostEqual(pytorch["pytorch_loss_spread"], 0.1)
        self.assertNotIn("max_loss_difference_vs_pytorch_median", pytorch)
        self.assertAlmostEqual(mine["max_loss_difference_vs_pytorch_median"], 0.01995)
        self.assertAlmostEqual(rows[("resnet_train_fixed", "expandable")]["max_loss_difference_vs_pytorch_median"], 0.29995)
        self.assertAlmostEqual(mine["utilization"], 0.9)
        failed = rows[("resnet_train_fixed", "nocache")]
        self.assertEqual((failed["runs_ok"], failed["runs"], failed["errors"]), (0, 1, ["exit status 1"]))
        serve = rows[("gpt_serve", "vrampool")]
        self.assertTrue(serve["token_counts_match_pytorch"])
        self.assertEqual((serve["token_ids_match_pytorch"], serve["token_ids_compared"]), (1, 2))

    def test_a_host_that_slows_down_steadily_moves_the_medians_not_the_interpolated_ratio(self):
        # Both modes take 4.0 s + 0.1 s per position in the call: the same speed at every moment.
        order = ["vrampool", "pytorch", "expandable", "pytorch", "expandable", "vrampool", "expandable", "vrampool",
                 "pytorch"]
        runs = [record("gpt_train_varlen", mode, 4.0 + 0.1 * i, i // 3) for i, mode in enumerate(order)]
        runs.insert(0, record("gpt_train_varlen", "vrampool", 9.0, -1, role="warmup"))
        rows = {row["mode"]: row for row in e2e.summarize(runs)}
        self.assertAlmostEqual(rows["vrampool"]["wall_vs_pytorch"], 4.5 / 4.3)
        self.assertAlmostEqual(rows["vrampool"]["wall_vs_pytorch_interpolated"], 1.0)
        self.assertAlmostEqual(rows["expandable"]["wall_vs_pytorch_interpolated"], 1.0)
        self.assertNotIn("wall_vs_pytorch_interpolated", rows["pytorch"])
        # The first run has PyTorch runs on one side only: the nearest stands in.
        self.assertEqual(e2e.interpolated_ratios(runs, "gpt_train_varlen", "vrampool")[0], 4.0 / 4.1)

    def test_warm_up_runs_count_in_no_figure(self):
        runs = [
            record("resnet_train_fixed", "vrampool", 9.0, -1, losses=[9.0], role="warmup"),
            record("resnet_train_fixed", "vrampool", 2.0, 0, losses=[7.0]),
            record("resnet_train_fixed", "pytorch", 2.0, 0, losses=[7.0]),
        ]
        (vrampool,) = [r for r in e2e.summarize(runs) if r["mode"] == "vrampool"]
        self.assertEqual((vrampool["runs"], vrampool["wall_s_max"], vrampool["wall_vs_pytorch"]), (1, 2.0, 1.0))
        self.assertEqual(vrampool["max_loss_difference_vs_pytorch_median"], 0.0)

    def test_the_report_is_written_from_the_run_records(self):
        with tempfile.TemporaryDirectory() as folder:
            out = pathlib.Path(folder)
            runs = [
                record("gpt_train_varlen", "pytorch", 8.0, 0, losses=[10.9]),
                record("gpt_train_varlen", "pytorch", 8.0, 1, losses=[10.91], role="spread"),
                record("gpt_train_varlen", "expandable", 8.4, 0, losses=[10.9]),
                record("gpt_train_varlen", "vrampool", 8.4, 0, losses=[11.0]),
            ]
            table = reported(out, runs)
            row = "| gpt_train_varlen | expandable | 1/1 | 8.400 (8.400-8.400) | 1.050x (1.050x) | 1,000 | 900 | 0.900 |"
            self.assertIn(row, table)
            self.assertIn("| 5.00e-03 from PyTorch's median: within its spread |", table)
            self.assertIn("| 9.50e-02 from PyTorch's median: OUTSIDE its spread |", table)
            self.assertIn("| own spread 1.00e-02 (2 runs) |", table)
            self.assertEqual(len(json.loads((out / "pytorch-e2e.json").read_text())["rows"]), 3)

    def test_a_ratio_just_over_the_target_is_not_rounded_down_to_it(self):
        with tempfile.TemporaryDirectory() as folder:
            out = pathlib.Path(folder)
            runs = [record("gpt_serve", "pytorch", 40.0, 0), record("gpt_serve", "vrampool", 40.93, 0)]
            self.assertIn("| 1.023x (1.023x) |", reported(out, runs))

    def test_the_report_lists_each_vrampool_runs_device_work_while_timed(self):
        with tempfile.TemporaryDirectory() as folder:
            out = pathlib.Path(folder)
            pool = record("gpt_train_varlen", "vrampool", 3.5, 1, losses=[10.9])
            pool["vrampool"] = {
                "timed": {
                    "backend_calls": 40,
                    "growths": 3,
                    "chunks_moved": 120,
                    "chunks_aliased": 64,
                    "synchronizations": 1,
                    "event_waits": 9,
                    "device_time_ns": 52_500_000,
                    "wait_time_ns": 31_000_000,
                }
            }
            runs = [record("gpt_train_varlen", "pytorch", 3.4, 0, losses=[10.9]), pool]
            table = reported(out, runs)
            self.assertIn(
                "- gpt_train_varlen vrampool run 1 (3.500 s): 40 memory calls, 3 growths, 120 chunks moved, 64 aliased, "
                "10 waits "
                "(1 for the whole device); 52.5 ms in device work, 31.0 ms of it waiting",
                table,
            )

    def test_deterministic_runs_must_agree_bit_for_bit_and_never_mix_with_others(self):
        with tempfile.TemporaryDirectory() as folder:
            out = pathlib.Path(folder)
            runs = [
                record("gpt_train_varlen", "pytorch", 9.0, 0, losses=[10.9, 10.5]),
                record("gpt_train_varlen", "pytorch", 9.0, 1, losses=[10.9, 10.5], role="spread"),
                record("gpt_train_varlen", "vrampool", 9.0, 0, losses=[10.9, 10.5]),
                record("gpt_train_varlen", "expandable", 9.0, 0, losses=[10.9, 10.500001]),
            ]
            for run in runs:
                run["deterministic"] = True
            table = reported(out, runs)
            self.assertIn("**Deterministic kernels**", table)
            self.assertIn("| own spread 0.00e+00 (2 runs) |", table)
            self.assertIn("| 0.00e+00 from PyTorch's median: within its spread |", table)
            self.assertIn("from PyTorch's median: OUTSIDE its spread |", table, "a difference of 1e-6 is caught")
            # `drive` refuses to add runs of the other kind before it runs anything.
            with self.assertRaises(SystemExit) as refused:
                e2e.drive(argparse.Namespace(out=str(out), deterministic=False))
            self.assertIn("holds runs with --deterministic", str(refused.exception))
            with open(out / "runs.jsonl", "a") as more:
                more.write(json.dumps(record("gpt_train_varlen", "pytorch", 4.0, 2, losses=[10.9, 10.5])) + "\n")
            with self.assertRaises(SystemExit), contextlib.redirect_stdout(io.StringIO()):
                e2e.report(out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
