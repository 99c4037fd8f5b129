//! Reading and writing named `f32` tensors as `.safetensors` (weights and optimizer
//! moments share this).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result, bail};
use lavender::checkpoint::contents::{ContentHasher, FileEntry, HashAlgorithm};
use safetensors::tensor::{Dtype, SafeTensors};
use tch::{Device, Kind, Tensor};

/// A tensor as little-endian `f32` bytes, copied straight from its memory: a
/// contiguous `f32` CPU tensor (the usual case) is only aliased; another is first
/// made one (moved to the CPU, converted, made contiguous).
struct F32Bytes {
    shape: Vec<usize>,
    /// Contiguous, `f32`, on the CPU; kept alive while its bytes are copied.
    tensor: Tensor,
}

impl F32Bytes {
    fn of(t: &Tensor) -> F32Bytes {
        let tensor = t
            .detach()
            .to_device(Device::Cpu)
            .to_kind(Kind::Float)
            .contiguous();
        F32Bytes {
            shape: tensor.size().iter().map(|&d| d as usize).collect(),
            tensor,
        }
    }

    fn len(&self) -> usize {
        self.tensor.numel() * std::mem::size_of::<f32>()
    }

    /// The tensor's own memory.
    fn native_bytes(&self) -> &[u8] {
        let len = self.len();
        if len == 0 {
            return &[];
        }
        // SAFETY: `tensor` is a contiguous f32 CPU tensor, so `data_ptr` (which
        // includes the storage offset) points at `numel` consecutive f32 values; it
        // is owned by `self` (its storage stays allocated for the borrow) and nothing
        // writes to it while it is copied: the copy is taken on the training thread
        // between two steps, and the optimizer updates these tensors in place only
        // once it is done (which is why training may go on while the copy is written).
        unsafe { std::slice::from_raw_parts(self.tensor.data_ptr() as *const u8, len) }
    }
}

/// Writes `tensors` (name → tensor) with string `metadata` to `path`, durably.
pub fn write(
    path: &Path,
    tensors: &[(String, &Tensor)],
    metadata: BTreeMap<String, String>,
) -> Result<()> {
    snapshot(tensors, metadata)?.write(path)
}

/// `tensors` with `metadata` laid out as a `.safetensors` file in a new [`FileImage`].
pub fn snapshot(
    tensors: &[(String, &Tensor)],
    metadata: BTreeMap<String, String>,
) -> Result<FileImage> {
    let mut image = FileImage::default();
    image.fill(tensors, metadata)?;
    Ok(image)
}

/// How much a file is written before its writeback is started (see
/// [`FileImage::write_buffered`]).
const WRITEBACK_CHUNK: usize = 64 << 20;
/// How much of an image the hasher takes at a time (BLAKE3 splits a large block
/// between threads and SIMD lanes; the writers read the same memory meanwhile).
const HASH_BLOCK: usize = 16 << 20;
/// One O_DIRECT write's size (a multiple of [`PAGE`]).
#[cfg(target_os = "linux")]
const DIRECT_CHUNK: usize = 8 << 20;
/// Writes in flight at once for one file: a virtual disk here wrote 489 MB in
/// 0.47 s from one writer and 0.29–0.35 s from four.
#[cfg(target_os = "linux")]
const DIRECT_WRITERS: usize = 4;

/// A `.safetensors` file's bytes, complete in host memory: what a checkpoint writes,
/// taken between two training steps and written while training goes on. Refilled
/// for every save, so its buffer is allocated (and its pages faulted in) once, not
/// on every save while training waits.
#[derive(Default)]
pub struct FileImage {
    bytes: PageBuf,
}

/// The size and alignment O_DIRECT asks of memory, file offsets and lengths (a
/// multiple of every logical block size in use).
const PAGE: usize = 4096;

#[derive(Clone, Copy)]
#[repr(C, align(4096))]
struct Page([u8; PAGE]);

/// Bytes in whole pages, starting on a page boundary: writable with O_DIRECT
/// straight from where they are.
#[derive(Default)]
struct PageBuf {
    pages: Vec<Page>,
    len: usize,
}

impl PageBuf {
    /// Grows with zeroed pages (each one written, so faulted in) or shrinks, keeping
    /// the allocation.
    fn resize(&mut self, len: usize) {
        self.pages.resize(len.div_ceil(PAGE), Page([0; PAGE]));
        self.len = len;
    }

    fn as_slice(&self) -> &[u8] {
        // SAFETY: `Page` is `repr(C)` over `[u8; PAGE]` with size equal to its
        // alignment, so the pages are one run of initialized bytes, no padding; and
        // `len` never exceeds `pages.len() * PAGE` (`resize` keeps them together).
        unsafe { std::slice::from_raw_parts(self.pages.as_ptr().cast::<u8>(), self.len) }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`; the borrow of `self` is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.pages.as_mut_ptr().cast::<u8>(), self.len) }
    }
}

impl FileImage {
    /// An image whose buffer already holds `data_bytes` of tensors and room
    /// for a header, every page of it faulted in: the first [`Self::fill`] of that
    /// size then only copies. (Faulting in a fresh buffer costs far more than the
    /// copy into it: 0.8 s against 0.05 s for a 489 MB checkpoint on a 2-core VM.)
    pub fn with_pages_for(data_bytes: usize) -> FileImage {
        // Headers are names, shapes and offsets: well under this for any model here.
        const HEADER_ROOM: usize = 1 << 20;
        let mut bytes = PageBuf::default();
        // Every page is written (with zeros), so every page is faulted in here.
        bytes.resize(data_bytes + HEADER_ROOM);
        FileImage { bytes }
    }

    /// Lays out `tensors` (moved to the CPU and converted to `f32` when they are not
    /// already) with `metadata` as a `.safetensors` file, replacing what the image
    /// held: the header (tensors in the given order, keys sorted, so equal inputs give
    /// equal bytes), then each tensor's bytes, copied on up to two threads.
    pub fn fill(
        &mut self,
        tensors: &[(String, &Tensor)],
        metadata: BTreeMap<String, String>,
    ) -> Result<()> {
        let data: Vec<(&str, F32Bytes)> = tensors
            .iter()
            .map(|(n, t)| (n.as_str(), F32Bytes::of(t)))
            .collect();
        let mut meta = metadata;
        // Hugging Face's loaders require the format key.
        meta.entry("format".into()).or_insert_with(|| "pt".into());
        let mut header = serde_json::Map::new();
        header.insert("__metadata__".into(), serde_json::to_value(&meta)?);
        let mut offset = 0usize;
        for (name, b) in &data {
            if name.as_bytes() == b"__metadata__" || header.contains_key(*name) {
                bail!("tensor name {name:?} is reserved or repeated");
            }
            header.insert(
                (*name).to_string(),
                serde_json::json!({
                    "dtype": "F32",
                    "shape": b.shape,
                    "data_offsets": [offset, offset + b.len()],
                }),
            );
            offset += b.len();
        }
        let mut header = serde_json::to_vec(&header)?;
        // The data starts 8-byte aligned (what the format's own writer does).
        header.resize(header.len().next_multiple_of(8), b' ');
        let start = 8 + header.len();
        // The same size as the previous fill (the usual case), or smaller than a
        // buffer made by `with_pages_for`: no reallocation and no page faults, only
        // the copy below.
        self.bytes.resize(start + offset);
        let (head, body) = self.bytes.as_mut_slice().split_at_mut(start);
        head[..8].copy_from_slice(&(header.len() as u64).to_le_bytes());
        head[8..].copy_from_slice(&header);

        // Destination slices, one per tensor, split into two runs of about equal size.
        let mut parts: Vec<(&mut [u8], &[u8])> = Vec::with_capacity(data.len());
        let mut rest = body;
        for (_, b) in &data {
            let (dst, tail) = rest.split_at_mut(b.len());
            parts.push((dst, b.native_bytes()));
            rest = tail;
        }
        let half = offset / 2;
        let mut acc = 0;
        let split = parts
            .iter()
            .position(|(d, _)| {
                acc += d.len();
                acc >= half
            })
            .map_or(parts.len(), |i| i + 1);
        let (first, second) = parts.split_at_mut(split);
        let copy = |run: &mut [(&mut [u8], &[u8])]| {
            for (dst, src) in run.iter_mut() {
                dst.copy_from_slice(src);
                if cfg!(target_endian = "big") {
                    for c in dst.chunks_exact_mut(4) {
                        c.reverse();
                    }
                }
            }
        };
        std::thread::scope(|s| {
            s.spawn(|| copy(second));
            copy(first);
        });
        Ok(())
    }

    /// The file's size in bytes.
    pub fn size(&self) -> u64 {
        self.bytes.len as u64
    }

    /// [`Self::write_unsynced`] as `dir/name`, the same bytes hashed with `algorithm`
    /// on a thread beside the writers: the manifest's entry comes from the bytes
    /// written, with no second read of the file. Not durable yet (as there).
    pub fn write_hashed(
        &self,
        dir: &Path,
        name: &str,
        algorithm: HashAlgorithm,
    ) -> Result<FileEntry> {
        let (written, hash) = std::thread::scope(|s| {
            let hasher = s.spawn(|| {
                let mut h = algorithm.hasher();
                for block in self.bytes.as_slice().chunks(HASH_BLOCK) {
                    match &mut h {
                        // BLAKE3 is a tree: a block's subtrees hash on every core, so
                        // the larger file's hash keeps up with its write while
                        // training holds the cores.
                        ContentHasher::Blake3(b) => {
                            b.update_rayon(block);
                        }
                        other => other.update(block),
                    }
                }
                h.finish_hex()
            });
            let written = self.write_unsynced(&dir.join(name));
            (written, hasher.join())
        });
        written?;
        let hash = hash.map_err(|_| anyhow::anyhow!("the hashing thread for {name} panicked"))?;
        Ok(FileEntry {
            path: name.to_string(),
            size: self.size(),
            hash,
        })
    }

    /// Creates `path`, writes the image and fsyncs it: durable once this returns.
    pub fn write(&self, path: &Path) -> Result<()> {
        let f = self.write_unsynced(path)?;
        f.sync_all()
            .with_context(|| format!("could not fsync {}", path.display()))
    }

    /// Creates `path` and writes the image. Not durable yet: the caller must fsync
    /// the returned file (a checkpoint's commit fsyncs every file before its marker).
    ///
    /// On Linux the whole pages go with O_DIRECT, from the image's own memory, in
    /// [`DIRECT_CHUNK`]s taken by [`DIRECT_WRITERS`] threads at once: no copy into the
    /// page cache, which is where the time went while training held both cores (a
    /// 489 MB checkpoint took 0.6–0.7 s to copy there, against 0.26 s on an idle
    /// machine), and the disk gets several requests at a time. The last partial page
    /// goes through the page cache. A filesystem that refuses O_DIRECT (tmpfs,
    /// some network and overlay filesystems) gets [`Self::write_buffered`].
    pub fn write_unsynced(&self, path: &Path) -> Result<std::fs::File> {
        #[cfg(target_os = "linux")]
        match self.write_direct(path) {
            Ok(Some(f)) => return Ok(f),
            Ok(None) => {}
            Err(e) => return Err(e).with_context(|| format!("could not write {}", path.display())),
        }
        self.write_buffered(path)
    }

    /// Whole pages with O_DIRECT, the rest buffered; `None` if this filesystem does
    /// not take O_DIRECT (nothing is left at `path` to rely on: the caller rewrites it).
    #[cfg(target_os = "linux")]
    fn write_direct(&self, path: &Path) -> std::io::Result<Option<std::fs::File>> {
        use std::os::unix::fs::{FileExt as _, OpenOptionsExt as _};
        use std::sync::atomic::{AtomicUsize, Ordering};
        let refused = |e: &std::io::Error| e.raw_os_error() == Some(libc::EINVAL);
        let direct = match std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
        {
            Ok(f) => f,
            Err(e) if refused(&e) => return Ok(None),
            Err(e) => return Err(e),
        };
        let bytes = self.bytes.as_slice();
        let whole = bytes.len() / PAGE * PAGE;
        let chunks = whole.div_ceil(DIRECT_CHUNK);
        let next = AtomicUsize::new(0);
        // Each writer takes the next chunk until none is left; the first error ends
        // its writer, and the others finish theirs (the file is rewritten or dropped).
        let write_chunks = || -> std::io::Result<()> {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= chunks {
                    return Ok(());
                }
                let at = i * DIRECT_CHUNK;
                let end = (at + DIRECT_CHUNK).min(whole);
                direct.write_all_at(&bytes[at..end], at as u64)?;
            }
        };
        let results: Vec<std::io::Result<()>> = std::thread::scope(|s| {
            let others: Vec<_> = (1..DIRECT_WRITERS.min(chunks))
                .map(|_| s.spawn(write_chunks))
                .collect();
            let mut results = vec![write_chunks()];
            results.extend(others.into_iter().map(|t| {
                t.join()
                    .unwrap_or_else(|_| Err(std::io::Error::other("a writer thread panicked")))
            }));
            results
        });
        for r in results {
            match r {
                Err(e) if refused(&e) => return Ok(None),
                r => r?,
            }
        }
        drop(direct);
        let f = std::fs::OpenOptions::new().write(true).open(path)?;
        f.write_all_at(&bytes[whole..], whole as u64)?;
        Ok(Some(f))
    }

    /// Creates `path` and writes the image through the page cache in large writes,
    /// starting the writeback of each 64 MiB as soon as it is written, so the disk
    /// works while the rest is copied.
    fn write_buffered(&self, path: &Path) -> Result<std::fs::File> {
        use std::io::Write as _;
        let write = || -> std::io::Result<std::fs::File> {
            let mut f = std::fs::File::create(path)?;
            let mut at = 0;
            for chunk in self.bytes.as_slice().chunks(WRITEBACK_CHUNK) {
                f.write_all(chunk)?;
                start_writeback(&f, at, chunk.len());
                at += chunk.len();
            }
            Ok(f)
        };
        write().with_context(|| format!("could not write {}", path.display()))
    }
}

/// Asks the kernel to start writing `len` bytes at `offset` to disk, without waiting
/// (Linux; elsewhere the fsync does it all). Only an early start: this is no
/// durability (no metadata, no disk cache flush) and its failure is harmless, since
/// the fsync that follows writes whatever is still dirty and reports the errors.
fn start_writeback(f: &std::fs::File, offset: usize, len: usize) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: sync_file_range only reads the descriptor, which `f` keeps open.
        unsafe {
            libc::sync_file_range(
                f.as_raw_fd(),
                offset as libc::off64_t,
                len as libc::off64_t,
                libc::SYNC_FILE_RANGE_WRITE,
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (f, offset, len);
}

/// A loaded `.safetensors` file: tensors by name (on the CPU) and its metadata.
pub struct TensorFile {
    pub tensors: BTreeMap<String, Tensor>,
    pub metadata: BTreeMap<String, String>,
}

impl TensorFile {
    /// Reads a `.safetensors` file; a missing, unreadable or corrupt one is a `data`
    /// failure (`crate::failure`).
    pub fn read(path: &Path) -> Result<TensorFile> {
        use crate::failure::KindExt;
        Self::read_any(path).kind(lavender::failure::FailureKind::Data)
    }

    fn read_any(path: &Path) -> Result<TensorFile> {
        let bytes =
            std::fs::read(path).with_context(|| format!("could not read {}", path.display()))?;
        let st = SafeTensors::deserialize(&bytes)
            .with_context(|| format!("{} is not a valid .safetensors file", path.display()))?;
        let (_, header) = SafeTensors::read_metadata(&bytes)
            .with_context(|| format!("{} has an unreadable header", path.display()))?;
        let metadata = header
            .metadata()
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect();
        let mut tensors = BTreeMap::new();
        for (name, view) in st.tensors() {
            let kind = match view.dtype() {
                Dtype::F32 => Kind::Float,
                Dtype::F16 => Kind::Half,
                Dtype::BF16 => Kind::BFloat16,
                Dtype::F64 => Kind::Double,
                other => bail!(
                    "tensor {name} in {} has dtype {other:?}; only floating-point tensors are expected",
                    path.display()
                ),
            };
            let shape: Vec<i64> = view.shape().iter().map(|&d| d as i64).collect();
            let t = Tensor::from_data_size(view.data(), &shape, kind).to_kind(Kind::Float);
            tensors.insert(name, t);
        }
        Ok(TensorFile { tensors, metadata })
    }

    pub fn meta_f64(&self, key: &str, path: &Path) -> Result<f64> {
        let v = self
            .metadata
            .get(key)
            .with_context(|| format!("{} has no {key:?} in its metadata", path.display()))?;
        v.parse().with_context(|| {
            format!(
                "{}: metadata {key:?} = {v:?} is not a number",
                path.display()
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_transposes_and_other_kinds_are_written_as_their_values() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.safetensors");
        let flat = Tensor::arange(24, (Kind::Float, Device::Cpu));
        // A view at an offset into shared storage (as the optimizer moments are).
        let view = flat.narrow(0, 5, 6).view([2, 3]);
        let transposed = flat.view([4, 6]).transpose(0, 1);
        let double = Tensor::arange(3, (Kind::Double, Device::Cpu)) / 4.0;
        let empty = Tensor::zeros([0, 3], (Kind::Float, Device::Cpu));
        let tensors = [
            ("view".to_string(), &view),
            ("transposed".to_string(), &transposed),
            ("double".to_string(), &double),
            ("empty".to_string(), &empty),
        ];
        write(&path, &tensors, BTreeMap::new()).expect("write");
        let file = TensorFile::read(&path).expect("read");
        for (name, original) in &tensors {
            let read = &file.tensors[name];
            assert_eq!(read.size(), original.size(), "{name}");
            assert!(
                read.equal(&original.to_kind(Kind::Float)),
                "{name}: {read} vs {original}"
            );
        }
        assert_eq!(file.metadata.get("format").map(String::as_str), Some("pt"));
    }

    /// Whole pages with O_DIRECT where the filesystem takes it (the disk filesystems
    /// Linux has; tmpfs since 6.6), through the page cache where it does not: the
    /// same bytes either way, the last partial page included, over a longer file.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_written_image_is_its_bytes_whichever_way_it_went() {
        // Several O_DIRECT chunks and a partial page.
        let n = 3 * DIRECT_CHUNK / 4 + 1000;
        let t = Tensor::arange(n as i64, (Kind::Float, Device::Cpu));
        let image = snapshot(&[("t".to_string(), &t)], BTreeMap::new()).expect("snapshot");
        assert_ne!(
            image.bytes.as_slice().len() % PAGE,
            0,
            "a partial last page"
        );
        let target = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target");
        let mut dirs = vec![tempfile::tempdir_in(&target).expect("tempdir in target/")];
        if std::path::Path::new("/dev/shm").is_dir() {
            dirs.push(tempfile::tempdir_in("/dev/shm").expect("tempdir in /dev/shm"));
        }
        for dir in &dirs {
            let path = dir.path().join("t.safetensors");
            let check = |how: &str| {
                let written = std::fs::read(&path).unwrap();
                assert!(
                    written == image.bytes.as_slice(),
                    "{} ({how}): the file differs from the image",
                    dir.path().display()
                );
                std::fs::write(&path, vec![7u8; 2 * written.len()]).unwrap();
            };
            std::fs::write(&path, vec![7u8; 2 * image.bytes.as_slice().len()]).unwrap();
            match image.write_direct(&path).expect("write") {
                Some(_) => check("O_DIRECT"),
                None if is_disk(dir.path()) => {
                    panic!("{}: O_DIRECT refused", dir.path().display())
                }
                None => {}
            }
            image.write_buffered(&path).expect("write buffered");
            check("buffered");
        }
    }

    /// On a disk filesystem (ext4, XFS, Btrfs), where O_DIRECT must work.
    #[cfg(target_os = "linux")]
    fn is_disk(dir: &std::path::Path) -> bool {
        use std::os::unix::ffi::OsStrExt as _;
        let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path and a zeroed struct for statfs to fill.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::statfs(c.as_ptr(), &mut st) }, 0);
        matches!(
            st.f_type,
            libc::EXT4_SUPER_MAGIC | libc::XFS_SUPER_MAGIC | libc::BTRFS_SUPER_MAGIC
        )
    }

    /// The entry hashed beside the writers is the file's own: what the verifier
    /// finds reading it back.
    #[test]
    fn a_hashed_write_names_the_bytes_on_disk() {
        let n = (3 << 20) + 1000;
        let t = Tensor::arange(n as i64, (Kind::Float, Device::Cpu));
        let image = snapshot(&[("t".to_string(), &t)], BTreeMap::new()).expect("snapshot");
        let dir = tempfile::tempdir().expect("tempdir");
        for alg in [HashAlgorithm::Blake3, HashAlgorithm::Sha256] {
            let entry = image
                .write_hashed(dir.path(), "t.safetensors", alg)
                .unwrap();
            let path = dir.path().join("t.safetensors");
            assert_eq!(entry.path, "t.safetensors");
            assert_eq!(
                (entry.size, entry.hash),
                lavender::checkpoint::contents::hash_file(&path, alg).unwrap()
            );
        }
    }

    #[test]
    fn a_refilled_image_is_the_file_a_fresh_one_would_be() {
        let big = Tensor::arange(100_000, (Kind::Float, Device::Cpu));
        let small = Tensor::arange(6, (Kind::Float, Device::Cpu)).view([2, 3]);
        let meta = BTreeMap::from([("step".to_string(), "7".to_string())]);
        let tensors = [("b".to_string(), &big), ("a".to_string(), &small)];
        let fresh = snapshot(&tensors, meta.clone()).expect("snapshot");

        // Filled first with other tensors (another size), then with these.
        let mut reused = snapshot(&[("x".to_string(), &small)], BTreeMap::new()).unwrap();
        reused.fill(&tensors, meta).expect("refill");
        assert!(
            reused.bytes.as_slice() == fresh.bytes.as_slice(),
            "a refill differs from a fresh image"
        );

        // What the format's own reader accepts, with the values in place.
        let st =
            SafeTensors::deserialize(reused.bytes.as_slice()).expect("a valid .safetensors file");
        assert_eq!(st.tensor("a").unwrap().shape(), [2, 3]);
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.safetensors");
        reused.write(&path).expect("write");
        let file = TensorFile::read(&path).expect("read");
        assert!(file.tensors["b"].equal(&big));
        assert!(file.tensors["a"].equal(&small));
        assert_eq!(file.metadata.get("step").map(String::as_str), Some("7"));
        assert_eq!(file.metadata.get("format").map(String::as_str), Some("pt"));
    }
}
