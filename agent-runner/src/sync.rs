//! The one poison-tolerant mutex lock the workspace uses.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, going on when a panic poisoned it: every lock in this workspace guards a map or a
/// value that is whole between statements, so what a panicking holder left is still consistent.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
