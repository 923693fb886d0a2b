//! TODO(inspect helper)
