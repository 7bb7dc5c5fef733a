//! Threads under their filter: [`spawn`] starts a thread that installs its
//! filter before it runs, [`install_here`] filters the calling thread.

use std::cell::Cell;
use std::sync::mpsc::sync_channel;
use std::thread::JoinHandle;

use super::Filter;

thread_local! {
    /// The thread's name, for the SIGSYS report: const-initialised, no
    /// destructor, so a signal handler may read it.
    pub(super) static NAME: Cell<[u8; 16]> = const { Cell::new([0; 16]) };
}

/// Names the calling thread `name` for the SIGSYS report and installs
/// `filter`, if any.
fn apply(name: &str, filter: Option<&Filter>) -> Result<(), String> {
    let mut n = [0u8; 16];
    let len = name.len().min(15);
    n[..len].copy_from_slice(&name.as_bytes()[..len]);
    NAME.with(|c| c.set(n));
    for p in filter.into_iter().flatten() {
        seccompiler::apply_filter(p).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Installs `filter` (if any) on the calling thread, named `name` in the
/// SIGSYS report: the main thread's, once the setup is done (it started
/// no filtered thread's way, [`spawn`]). Credentials are the caller's to
/// drop first: the filter forbids the calls.
pub fn install_here(name: &str, filter: Option<Filter>) -> std::io::Result<()> {
    apply(name, filter.as_ref()).map_err(|e| {
        std::io::Error::other(format!(
            "cannot install the seccomp filter of thread {name}: {e}"
        ))
    })
}

/// Spawn a thread named `name` that installs `filter` (if any) before it
/// runs `f`. Returns once the filter is in place, or the error that kept
/// it out (then `f` never ran).
pub fn spawn<F>(name: &str, filter: Option<Filter>, f: F) -> std::io::Result<JoinHandle<()>>
where
    F: FnOnce() + Send + 'static,
{
    let (tx, rx) = sync_channel::<Result<(), String>>(1);
    let owned = name.to_owned();
    let handle = std::thread::Builder::new()
        .name(owned.clone())
        .spawn(move || {
            // Credentials belong to the thread: it gives up root itself
            // (`--user`), before its filter forbids the calls.
            if let Err(e) = crate::privileges::drop_this_thread() {
                let _ = tx.send(Err(format!("cannot drop to --user: {e}")));
                return;
            }
            if let Err(e) = apply(&owned, filter.as_ref()) {
                let _ = tx.send(Err(e));
                return;
            }
            let _ = tx.send(Ok(()));
            drop(tx);
            f();
        })?;
    match rx.recv() {
        Ok(Ok(())) => Ok(handle),
        Ok(Err(e)) => {
            let _ = handle.join();
            Err(std::io::Error::other(format!(
                "cannot install the seccomp filter of thread {name}: {e}"
            )))
        }
        Err(_) => {
            let _ = handle.join();
            Err(std::io::Error::other(format!(
                "thread {name} died at start"
            )))
        }
    }
}
