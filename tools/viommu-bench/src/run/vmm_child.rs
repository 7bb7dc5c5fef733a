//! A VMM that dies with the tool.
//!
//! The tool starts each VM's VMM as its child and stops it itself on
//! every way out it sees (the cell's end, a hang, Ctrl-C, SIGTERM,
//! SIGHUP). SIGKILL and the OOM killer give it no way out: the VMM then
//! ran on, an orphan holding the drive through VFIO, its guest's console
//! writing to a closed pipe, until its guest ended (or for ever, when the
//! guest waits for an answer on its console). A later `--restore` then
//! blocked in the unbind from vfio-pci. So each VMM asks the kernel for
//! SIGKILL when the tool goes (`PR_SET_PDEATHSIG`), and the drive is
//! free for `--restore` as soon as the tool is gone.
//!
//! The kernel sends it when the *thread* that started the child ends:
//! the tool's runtime is single-threaded, so that is the main thread,
//! which lives as long as the tool. A VMM that changes its credentials
//! (our VMM's `--user`) loses the setting, as the kernel clears it then.

/// Makes the child `cmd` starts get SIGKILL when this process (the thread
/// that spawns it) ends; if this process is already gone by the time the
/// child sets it up, the child does not start.
pub fn die_with_this_process(cmd: &mut tokio::process::Command) {
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs in the child between fork and exec and
    // makes only async-signal-safe system calls (prctl, getppid), no
    // allocation on the success path.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died before the prctl: no signal comes.
            if libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests;
