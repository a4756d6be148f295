//! Work over a list on several threads, the results in the list's order.

use std::any::Any;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The results of [`map_ordered`].
pub(crate) struct Ordered<R> {
    /// One per item, in item order; `None` where the worker that took the item panicked.
    pub results: Vec<Option<R>>,
    /// The first panic of a worker, if any.
    pub panic: Option<Box<dyn Any + Send>>,
}

/// `f` of every item on `workers` threads made by `builder`: each thread takes the next item
/// when it is free, so the order of the results does not depend on the number of threads.
pub(crate) fn map_ordered<T: Sync, R: Send>(
    items: &[T],
    workers: usize,
    builder: impl Fn() -> std::thread::Builder,
    f: impl Fn(&T) -> R + Sync,
) -> std::io::Result<Ordered<R>> {
    let next = AtomicUsize::new(0);
    let mut results: Vec<Option<R>> = (0..items.len()).map(|_| None).collect();
    let mut panic = None;
    std::thread::scope(|scope| -> std::io::Result<()> {
        let mut handles = Vec::new();
        for _ in 0..workers.clamp(1, items.len().max(1)) {
            handles.push(builder().spawn_scoped(scope, || {
                let mut out = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(item) = items.get(i) else { break };
                    out.push((i, f(item)));
                }
                out
            })?);
        }
        for handle in handles {
            match handle.join() {
                Ok(done) => {
                    for (i, result) in done {
                        results[i] = Some(result);
                    }
                }
                Err(error) => {
                    panic.get_or_insert(error);
                }
            }
        }
        Ok(())
    })?;
    Ok(Ordered { results, panic })
}
