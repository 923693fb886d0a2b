//! Pure compatibility judgement: (see `evaluate`) the verdict engine over the
//! CRD types (`api`) and the facts vocabulary (`facts`). No I/O, no async, no
//! clock. (Named `compat` rather than `core` so it never shadows the `core`
//! crate.)

pub mod evaluate;
