//! vrampool-replay: replaying real allocation traces through vrampool's strategies on the simulated
//! device, to measure which strategy wastes least and costs least, and to advise one with its config.
//!
//! - [`ReplayPlan`] turns a trace into the operations a pool sees (allocations and frees, numbered slots);
//! - [`replay()`] runs a plan through one pool (a [`vrampool::PoolSpec`]) on a [`vrampool::SimDevice`] and
//!   measures peak live and reserved bytes, utilization, fallbacks, out-of-memory refusals, device calls,
//!   the cost model's driver time and the pool's own CPU time per event;
//! - [`advise`] sweeps each strategy's parameters and recommends one;
//! - [`ShortDuration`] tells a trace too short for the driver-time budget (times that are not the
//!   microseconds of the run it recorded);
//! - [`expandable_segments`] models what PyTorch's caching allocator with expandable segments reserves for a
//!   trace's requests, the baseline vrampool's default is held to;
//! - [`ComparisonRow`] is one row of `vrampool compare`, with the JSON keys the command promises.
//!
//! ```no_run
//! use vrampool::PoolSpec;
//! use vrampool_replay::{ReplayOptions, ReplayPlan, replay};
//!
//! let trace = vrampool_trace::read_trace("traces/resnet_train_fixed.pickle.gz", &Default::default())?;
//! let plan = ReplayPlan::from_trace(&trace)?;
//! let result = replay(&plan, &PoolSpec::parse("strategy=dynamic,growth_factor=1.1")?, &ReplayOptions::default())?;
//! println!("utilization {:.3}", result.utilization);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]

mod advice;
mod candidates;
mod comparison_row;
mod error;
mod expandable_model;
mod replay;
mod replay_plan;
mod replay_result;
mod short_duration;
mod size_profile;

pub use advice::{Advice, DRIVER_BUDGET, Objective, StrategyAdvice, advise};
pub use candidates::candidates;
pub use comparison_row::ComparisonRow;
pub use error::{Error, Result};
pub use expandable_model::{ExpandableFigures, expandable_segments};
pub use replay::{ReplayOptions, ReplayTarget, replay, replay_logged, replay_on};
pub use replay_plan::{Operation, ReplayPlan};
pub use replay_result::{ReplayResult, TimelinePoint};
pub use short_duration::{ShortDuration, least_driver_time_us};
pub use size_profile::SizeProfile;
