//! How SOBA opens and creates files: private modes for everything it writes, regular files
//! only for everything it reads, and no folder created behind the user's back.
//!
//! Session logs hold whole conversations (code, paths, sometimes secrets): folders SOBA creates
//! for its data are `0700` and files it creates `0600`. These are the modes asked of the OS at
//! creation, so a stricter umask still narrows them; an existing file's mode is never changed.
//!
//! A FIFO, a device or a directory given where a file belongs would block a reader forever
//! (a FIFO with no writer) or fail obscurely; such paths are opened without blocking and
//! refused before anything is read.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Mode of files SOBA creates.
pub const PRIVATE_FILE_MODE: u32 = 0o600;
/// Mode of folders SOBA creates for its data.
pub const PRIVATE_DIR_MODE: u32 = 0o700;

/// Open an existing regular file for reading; anything else is refused before it is read.
pub fn open_regular(path: &Path) -> io::Result<File> {
    open_checked(path, OpenOptions::new().read(true))
}

/// The whole text of a regular file (a transcript); anything else is refused before it is read.
pub fn read_regular_to_string(path: &Path) -> io::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    open_regular(path)?.read_to_string(&mut text)?;
    Ok(text)
}

/// Open an existing regular file for appending (and reading its length).
pub fn open_regular_append(path: &Path) -> io::Result<File> {
    open_checked(path, OpenOptions::new().read(true).append(true))
}

/// Open an existing regular file for writing in place (truncation, repair).
pub fn open_regular_write(path: &Path) -> io::Result<File> {
    open_checked(path, OpenOptions::new().write(true))
}

fn open_checked(path: &Path, options: &mut OpenOptions) -> io::Result<File> {
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
    let file = options.custom_flags(libc::O_NONBLOCK).open(path)?;
    refuse_irregular(path, &file)?;
    clear_nonblocking(&file)?;
    Ok(file)
}

/// Fail with a clear error unless the opened file is a regular file.
fn refuse_irregular(path: &Path, file: &File) -> io::Result<()> {
    let kind = file.metadata()?.file_type();
    if kind.is_file() {
        return Ok(());
    }
    let what = if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a named pipe (FIFO)"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else {
        "not a regular file"
    };
    Err(not_regular(path, what))
}

/// The error for a path that is not a regular file.
pub fn not_regular(path: &Path, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "{} is {what}; SOBA reads and writes regular files only. Give the path of a file",
            path.display()
        ),
    )
}

/// Regular files never block, but the descriptor is handed to code that may expect blocking
/// semantics; put it back the way a plain open leaves it.
fn clear_nonblocking(file: &File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: `fd` is a valid descriptor owned by `file` for the duration of both calls.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above; only the O_NONBLOCK bit changes.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Create a new file (never an existing one, never through a symbolic link) with mode `0600`.
pub fn create_private(path: &Path, append: bool) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .append(append)
        .create_new(true)
        .mode(PRIVATE_FILE_MODE)
        .open(path)
}

/// Open a file for appending, creating it with mode `0600` when missing; refuses symbolic
/// links and anything but a regular file.
pub fn open_or_create_private_append(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(PRIVATE_FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| symlink_refused(path, e))?;
    refuse_irregular(path, &file)?;
    clear_nonblocking(&file)?;
    Ok(file)
}

/// `O_NOFOLLOW` reports a symbolic link as `ELOOP`; say what it means.
pub fn symlink_refused(path: &Path, e: io::Error) -> io::Error {
    if e.raw_os_error() == Some(libc::ELOOP) {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is a symbolic link; SOBA does not write through links here. Remove the link",
                path.display()
            ),
        )
    } else {
        e
    }
}

/// Create `dir` and any missing parents as private (`0700`) folders; existing ones are left
/// as they are.
pub fn create_private_dir_all(dir: &Path) -> io::Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(PRIVATE_DIR_MODE)
        .create(dir)
}

/// Create one private (`0700`) folder; `AlreadyExists` when anything is at `dir` (a link is
/// not followed).
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    DirBuilder::new().mode(PRIVATE_DIR_MODE).create(dir)
}

/// An output path's folder must exist: creating folders from a mistyped path would hide the
/// mistake.
pub fn require_parent(path: &Path) -> io::Result<()> {
    let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return Ok(());
    };
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::NotADirectory,
            format!(
                "{} is not a folder, so {} cannot be written there. Choose another path",
                dir.display(),
                path.display()
            ),
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "the folder {} does not exist, so {} cannot be written. Create the folder first (mkdir -p) or choose another path",
                dir.display(),
                path.display()
            ),
        )),
        Err(e) => Err(e),
    }
}

/// Replace `path` with `bytes` so that readers see the old or the new file, never a part:
/// write a temporary file (mode `0600`) in the same directory, sync it, rename it over `path`.
/// The directory must exist.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| {
        // A leftover from a killed writer with this pid is ours to replace.
        match std::fs::remove_file(&tmp) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let mut f = create_private(&tmp, false)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = open_regular(&fifo).unwrap_err().to_string();
        assert!(
            e.contains("named pipe (FIFO)") && e.contains("regular files"),
            "{e}"
        );
        let e = open_regular_append(&fifo).unwrap_err().to_string();
        assert!(e.contains("FIFO"), "{e}");
        let e = open_regular(dir.path()).unwrap_err().to_string();
        assert!(e.contains("a directory"), "{e}");
        let e = open_regular(Path::new("/dev/null"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("a device"), "{e}");
    }

    #[test]
    fn created_files_and_folders_are_private_and_never_wider_than_the_umask() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a/b/f");
        create_private_dir_all(f.parent().unwrap()).unwrap();
        assert_eq!(mode(&dir.path().join("a")), 0o700);
        assert_eq!(mode(&dir.path().join("a/b")), 0o700);
        create_private(&f, true).unwrap();
        assert_eq!(mode(&f), 0o600);
        // An existing file is never replaced.
        assert_eq!(
            create_private(&f, true).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
    }

    #[test]
    fn appending_through_a_symbolic_link_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::write(&target, "keep").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = open_or_create_private_append(&link)
            .unwrap_err()
            .to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
    }

    #[test]
    fn a_missing_output_folder_is_an_error_that_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let e = require_parent(&dir.path().join("no/such/out.jsonl"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("does not exist") && e.contains("mkdir -p"),
            "{e}"
        );
        assert!(!dir.path().join("no").exists());
        require_parent(&dir.path().join("out.jsonl")).unwrap();
        require_parent(Path::new("relative.jsonl")).unwrap();
    }
}
