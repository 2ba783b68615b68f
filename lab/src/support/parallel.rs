//! Independent jobs (guest boots) on a few threads at once, in list order, with one progress
//! line when each starts and ends: concurrent jobs never interleave partial output.

use crate::support::progress;
use anyhow::Result;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Runs `f` on every item, at most `width` at a time, starting them in list order, and returns
/// the results in list order, so the caller sees the same thing as from a plain loop. After the
/// first error no further item starts (those running finish), and the error of the earliest
/// item that failed is returned, as a loop with `?` would. With more than one item, a note
/// `<what> 2/5 started: LABEL` and `<what> 2/5 finished in 41.3 s: LABEL` (or `failed`)
/// brackets each. Width 1 runs on the caller's thread.
pub fn try_map<T: Sync, R: Send>(
    width: usize,
    what: &str,
    items: &[T],
    label: impl Fn(&T) -> String + Sync,
    f: impl Fn(&T) -> Result<R> + Sync,
) -> Result<Vec<R>> {
    let n = items.len();
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let slots: Vec<Mutex<Option<Result<R>>>> = items.iter().map(|_| Mutex::new(None)).collect();
    let worker = || {
        while !failed.load(Ordering::SeqCst) {
            let i = next.fetch_add(1, Ordering::SeqCst);
            let Some(item) = items.get(i) else { break };
            let name = (n > 1).then(|| label(item));
            if let Some(name) = &name {
                progress::note(format!("{what} {}/{n} started: {name}", i + 1));
            }
            let t0 = Instant::now();
            let r = f(item);
            if let Some(name) = &name {
                let how = if r.is_ok() { "finished" } else { "failed" };
                progress::note(format!("{what} {}/{n} {how} in {:.1} s: {name}", i + 1, t0.elapsed().as_secs_f64()));
            }
            if r.is_err() {
                failed.store(true, Ordering::SeqCst);
            }
            *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
        }
    };
    let threads = width.clamp(1, n.max(1));
    if threads == 1 {
        worker();
    } else {
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(worker);
            }
        });
    }
    // Items start in order and none starts after a failure, so every item not run comes after
    // one that failed: the first slot that is not Ok holds that error.
    let mut out = Vec::with_capacity(n);
    for slot in slots {
        match slot.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some(Ok(r)) => out.push(r),
            Some(Err(e)) => return Err(e),
            None => unreachable!("an item was skipped without an earlier failure"),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn results_come_back_in_list_order_whatever_finishes_first() {
        // The first item is the slowest: with two threads the others finish before it.
        let items = [30u64, 1, 2, 3, 4];
        let got = try_map(
            2,
            "job",
            &items,
            |x| x.to_string(),
            |&ms| {
                std::thread::sleep(Duration::from_millis(ms));
                Ok(ms * 10)
            },
        )
        .unwrap();
        assert_eq!(got, [300, 10, 20, 30, 40]);
    }

    #[test]
    fn width_two_runs_two_at_once_and_width_one_never_does() {
        // Item 0 waits for a message only item 1 sends: that needs both running together.
        let rendezvous = |width: usize| {
            let (tx, rx) = mpsc::channel::<()>();
            let (tx, rx) = (Mutex::new(tx), Mutex::new(rx));
            try_map(
                width,
                "job",
                &[0, 1],
                |x| x.to_string(),
                |&i| {
                    if i == 1 {
                        let _ = tx.lock().unwrap().send(());
                        return Ok(true);
                    }
                    Ok(rx.lock().unwrap().recv_timeout(Duration::from_millis(500)).is_ok())
                },
            )
            .unwrap()
        };
        assert_eq!(rendezvous(2), [true, true]);
        assert_eq!(rendezvous(1), [false, true], "width 1 ran item 1 while item 0 ran");
    }

    #[test]
    fn after_a_failure_nothing_new_starts_and_the_first_error_is_returned() {
        let started = Mutex::new(vec![]);
        let e = try_map(
            1,
            "job",
            &[0, 1, 2, 3],
            |x| x.to_string(),
            |&i| {
                started.lock().unwrap().push(i);
                if i == 1 {
                    anyhow::bail!("item {i} broke");
                }
                Ok(i)
            },
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "item 1 broke");
        assert_eq!(*started.lock().unwrap(), [0, 1]);
        assert!(try_map(3, "job", &[] as &[u32], |x| x.to_string(), |&i| Ok(i)).unwrap().is_empty());
    }
}
