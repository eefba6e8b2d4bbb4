//! Guest tests of the user-space device nodes `/dev/rmlx5_uverbsN`.

use std::ffi::CString;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};

use rmlx5_guest_tests::{ensure, errno_str, run_all, Test, TestResult};

/// The HCA count the guest's /init loaded the module with.
fn num_hcas() -> Result<u32, String> {
    let s = std::env::var("RMLX5_NUM_HCAS").map_err(|e| format!("RMLX5_NUM_HCAS: {e}"))?;
    s.trim()
        .parse()
        .map_err(|e| format!("RMLX5_NUM_HCAS {s:?}: {e}"))
}

fn node(i: u32) -> String {
    format!("/dev/rmlx5_uverbs{i}")
}

/// Opens a node with `open(2)` directly so that the errno is visible.
fn open_node(path: &str) -> Result<i32, String> {
    let c = CString::new(path).map_err(|e| e.to_string())?;
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(format!("open {path}: {}", errno_str(last_errno())));
    }
    Ok(fd)
}

fn close_fd(fd: i32) -> TestResult {
    // SAFETY: `fd` is a descriptor this test opened and has not closed yet.
    let rc = unsafe { libc::close(fd) };
    ensure!(rc == 0, "close: {}", errno_str(last_errno()));
    Ok(())
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// One node per HCA, a character device, mode 0600, owned by root, and no
/// node beyond the configured count.
fn devnodes_exist() -> TestResult {
    let n = num_hcas()?;
    for i in 0..n {
        let md = std::fs::metadata(node(i)).map_err(|e| format!("{}: {e}", node(i)))?;
        ensure!(
            md.file_type().is_char_device(),
            "{} is not a char device",
            node(i)
        );
        let mode = md.permissions().mode() & 0o7777;
        ensure!(mode == 0o600, "{} has mode {mode:o}, want 600", node(i));
        ensure!(
            md.uid() == 0 && md.gid() == 0,
            "{} is not owned by root",
            node(i)
        );
    }
    ensure!(
        std::fs::metadata(node(n)).is_err(),
        "{} exists beyond num_hcas",
        node(n)
    );
    Ok(())
}

/// Opening and closing works, repeatedly and with many contexts open at once
/// on every HCA.
fn open_close() -> TestResult {
    let n = num_hcas()?;
    for _ in 0..200 {
        let fd = open_node(&node(0))?;
        close_fd(fd)?;
    }
    let mut fds = Vec::new();
    for i in 0..n {
        for _ in 0..64 {
            fds.push(open_node(&node(i))?);
        }
    }
    for fd in fds {
        close_fd(fd)?;
    }
    Ok(())
}

/// Commands the module does not know get ENOTTY, whatever their shape.
fn unknown_ioctl_enotty() -> TestResult {
    let fd = open_node(&node(0))?;
    let mut buf = [0u8; 256];
    let cmds: [libc::c_ulong; 6] = [
        0,
        0x5401,      // TCGETS
        0xc018_1b7f, // _IOWR(0x1b, 0x7f, 24): our magic, unused number
        0x8008_1bff, // _IOR(0x1b, 0xff, 8)
        0x4100_abcd, // _IOW with a foreign magic
        0xffff_ffff,
    ];
    let mut result = Ok(());
    for cmd in cmds {
        // SAFETY: `buf` is valid for 256 bytes, more than any size encoded
        // in these command numbers that the kernel could copy.
        let rc = unsafe { libc::ioctl(fd, cmd, buf.as_mut_ptr()) };
        let e = last_errno();
        if rc != -1 || e != libc::ENOTTY {
            result = Err(format!(
                "ioctl {cmd:#x}: rc {rc}, errno {} (want ENOTTY)",
                errno_str(e)
            ));
            break;
        }
    }
    close_fd(fd)?;
    result
}

fn main() {
    std::process::exit(run_all(&[
        Test {
            name: "devnodes_exist",
            run: devnodes_exist,
        },
        Test {
            name: "open_close",
            run: open_close,
        },
        Test {
            name: "unknown_ioctl_enotty",
            run: unknown_ioctl_enotty,
        },
    ]));
}
