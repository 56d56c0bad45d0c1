//! The revision a snapshot holds, read from the database as it streams past.
//!
//! A member's revision read before its snapshot is only a lower bound of what the snapshot
//! holds: a lease that expires, a delete, a write in between moves it. The snapshot itself says
//! exactly: its database is a bbolt file, and etcd takes its revision on restore as the largest
//! of 1, the last key of its `key` bucket (revisions are the keys there, big-endian, so the last
//! key is the newest) and the `finishedCompactRev` and `scheduledCompactRev` of its `meta` bucket
//! (a compaction may have removed the newest revision, a tombstone, from the `key` bucket):
//! `store.restore` in
//! <https://github.com/etcd-io/etcd/blob/v3.6.17/server/storage/mvcc/kvstore.go>.
//!
//! A snapshot streams in page order, and a tree's pages point anywhere in the file, before and
//! after themselves. So every page is summarized as it passes, in what the walk may need of it
//! (a leaf's last revision; a branch's rightmost child and the children under the few names
//! looked for; a leaf holding one of those names), and the walk from the root runs at the end.
//! Pages the snapshot's tree does not reach (free pages, which etcd may be rewriting while it
//! streams) are summarized too, and never reached: the walk starts from the snapshot's own root.
//! About 8 bytes per page are kept (16 MiB for an 8 GiB database), and of one page at a time its
//! bytes up to its last key (`needs`).
//!
//! bbolt's layout: <https://github.com/etcd-io/bbolt/blob/v1.4.3/internal/common/page.go>
//! (page header, elements), `internal/common/meta.go` (the meta page and its FNV-64a checksum),
//! `internal/common/bucket.go` (a bucket's header; an inline bucket's page follows it), `tx.go`
//! (`WriteTo`: both meta pages, then every page below the meta's high-water mark), `cursor.go`
//! (`searchBranch`: a branch's child for a name). Little-endian, as on every host etcd supports
//! for production.

use std::collections::HashMap;

const PAGE_HEADER: usize = 16;
const ELEMENT: usize = 16;
const BRANCH: u16 = 0x01;
const LEAF: u16 = 0x02;
const META: u16 = 0x04;
const BUCKET_LEAF: u32 = 0x01;
const MAGIC: u32 = 0xED0C_DAED;
const VERSION: u32 = 2;
/// A page run (a page and its overflow) larger than this is not read: the revision is then not
/// known, and the caller keeps the one it read before the stream.
const MAX_RUN: usize = 64 << 20;
/// The bytes of pending pages held at once, made room for once: the keys of a page and a chunk
/// of the stream (more for a page whose keys lie past a large value).
const PENDING: usize = 256 << 10;
/// The largest database read: 1 TiB.
const MAX_FILE: u64 = 1 << 40;
/// Deeper than any bbolt tree of a database etcd can hold; a loop in a corrupt file ends here.
const MAX_DEPTH: usize = 64;

/// The names looked for: the root bucket's `key` and `meta`, and the `meta` bucket's compaction
/// marks (`schema/bucket.go`).
const KEY: usize = 0;
const META_BUCKET: usize = 1;
const FINISHED: usize = 2;
const SCHEDULED: usize = 3;
const NAMES: [&[u8]; 4] = [
    b"key",
    b"meta",
    b"finishedCompactRev",
    b"scheduledCompactRev",
];

/// `leaves[pgid]`: no leaf summarized there.
const NOT_A_LEAF: u64 = u64::MAX;
/// `leaves[pgid]`: a leaf whose last key is no revision.
const NOT_A_REVISION: u64 = u64::MAX - 1;

/// A branch page: its rightmost child, and its child for each looked-for name.
struct Branch {
    last: u64,
    named: [u64; 4],
}

/// What a bucket entry points at: a page of the file, or a page inline in the entry.
enum Bucket {
    Root(u64),
    Inline(Box<Leaf>),
}

/// A leaf page's summary: its last key's revision (`NOT_A_REVISION`, or 0 when empty), and the
/// looked-for names it holds (a bucket, or a compaction mark's revision).
struct Leaf {
    last: u64,
    buckets: [Option<Bucket>; 2],
    marks: [Option<u64>; 2],
}

impl Leaf {
    fn has_names(&self) -> bool {
        self.buckets.iter().any(Option::is_some) || self.marks.iter().any(Option::is_some)
    }
}

/// Fed a snapshot stream chunk by chunk (the SHA-256 trailer after the database is ignored);
/// `revision` then says what etcd would restore it at.
#[derive(Default)]
pub struct SnapshotRevision {
    /// Bytes from `at` on, not yet summarized.
    pending: Vec<u8>,
    at: u64,
    meta: Option<Meta>,
    /// The next page to summarize.
    next: u64,
    leaves: Vec<u64>,
    branches: HashMap<u64, Branch>,
    named: HashMap<u64, Leaf>,
    /// What made the file unreadable, first seen.
    broken: Option<String>,
}

#[derive(Clone, Copy)]
struct Meta {
    page_size: usize,
    root: u64,
    /// The high-water mark: pages 0..high are the file.
    high: u64,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// A revision key's main revision (`mvcc/revision.go`: 8 bytes big-endian, `_`, 8 bytes, and
/// `t` for a tombstone); None for any other key.
fn main_revision(key: &[u8]) -> Option<u64> {
    ((key.len() == 17 || key.len() == 18) && key[8] == b'_')
        .then(|| u64::from_be_bytes(key[..8].try_into().unwrap()))
}

/// FNV-64a, bbolt's meta checksum (Go's `hash/fnv`).
fn fnv64a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn meta(page: &[u8]) -> Result<Meta, String> {
    let m = page
        .get(PAGE_HEADER..PAGE_HEADER + 64)
        .ok_or("no meta page")?;
    let flags = u16_at(page, 8).unwrap_or_default();
    let (magic, version) = (u32_at(m, 0).unwrap(), u32_at(m, 4).unwrap());
    if flags != META || magic != MAGIC || version != VERSION {
        return Err(format!(
            "not a bbolt file (page flags {flags:#x}, magic {magic:#x}, version {version})"
        ));
    }
    if u64_at(m, 56).unwrap() != fnv64a(&m[..56]) {
        return Err("its meta page fails its checksum".into());
    }
    let page_size = u32_at(m, 8).unwrap() as usize;
    if !(1024..=(1 << 20)).contains(&page_size) || !page_size.is_power_of_two() {
        return Err(format!("page size {page_size}"));
    }
    Ok(Meta {
        page_size,
        root: u64_at(m, 16).unwrap(),
        high: u64_at(m, 40).unwrap(),
    })
}

/// A leaf element: its flags, its key, and where its value lies in the page (and how long).
type Element<'a> = (u32, &'a [u8], usize, usize);

/// The `i`th element of the leaf `page` (a page's bytes, its overflow included, or as many of
/// them as `needs` asked for: its value is sliced by the caller).
fn leaf_element(page: &[u8], i: usize) -> Option<Element<'_>> {
    let e = PAGE_HEADER + i * ELEMENT;
    let (flags, pos) = (u32_at(page, e)?, u32_at(page, e + 4)? as usize);
    let (ksize, vsize) = (
        u32_at(page, e + 8)? as usize,
        u32_at(page, e + 12)? as usize,
    );
    let key = page.get(e + pos..e + pos + ksize)?;
    Some((flags, key, e + pos + ksize, vsize))
}

/// How many bytes of a leaf or branch page `head` (its header and elements at least) are read
/// to summarize it: its keys, and the values of keys as long as a looked-for name; not its other
/// values, which a page's overflow mostly holds (a run need not be held whole: `make bench`).
/// None: more than its `run`, or elements past it (no page of a tree).
fn needs(head: &[u8], flags: u16, run: usize) -> Option<usize> {
    let count = usize::from(u16_at(head, 10)?);
    let mut need = PAGE_HEADER + count * ELEMENT;
    for i in 0..count {
        let e = PAGE_HEADER + i * ELEMENT;
        need = need.max(if flags == BRANCH {
            e + u32_at(head, e)? as usize + u32_at(head, e + 4)? as usize
        } else {
            let (pos, ksize) = (u32_at(head, e + 4)? as usize, u32_at(head, e + 8)? as usize);
            let vsize = u32_at(head, e + 12)? as usize;
            let named = NAMES.iter().any(|n| n.len() == ksize);
            e + pos + ksize + if named { vsize } else { 0 }
        });
    }
    (need <= run).then_some(need)
}

/// A leaf page summarized; None when its elements do not fit in it. No allocation but for the
/// rare leaf holding a looked-for name: every page of the stream passes here.
fn leaf(page: &[u8]) -> Option<Leaf> {
    summarize_leaf(page, true)
}

/// `leaf`; with `buckets` false (an inline bucket's page) its buckets are not read: bbolt never
/// inlines a bucket holding a bucket (`Bucket.inlineable`,
/// <https://github.com/etcd-io/bbolt/blob/v1.4.3/bucket.go>), and a crafted page nesting them
/// must not recurse.
fn summarize_leaf(page: &[u8], buckets: bool) -> Option<Leaf> {
    let count = usize::from(u16_at(page, 10)?);
    let last = match count {
        0 => 0,
        n => main_revision(leaf_element(page, n - 1)?.1).unwrap_or(NOT_A_REVISION),
    };
    let mut summary = Leaf {
        last,
        buckets: [None, None],
        marks: [None, None],
    };
    for i in 0..count {
        let (flags, key, at, vsize) = leaf_element(page, i)?;
        let Some(name) = NAMES.iter().position(|n| *n == key) else {
            continue;
        };
        let value = page.get(at..at + vsize)?;
        match name {
            KEY | META_BUCKET if buckets && flags & BUCKET_LEAF != 0 => {
                let root = u64_at(value, 0)?;
                summary.buckets[name] = Some(match root {
                    // An inline bucket: its page follows the 16-byte bucket header.
                    0 => Bucket::Inline(Box::new(summarize_leaf(value.get(16..)?, false)?)),
                    _ => Bucket::Root(root),
                });
            }
            FINISHED | SCHEDULED if flags & BUCKET_LEAF == 0 => {
                summary.marks[name - FINISHED] = Some(main_revision(value.get(..17)?)?);
            }
            _ => {}
        }
    }
    Some(summary)
}

/// A branch page summarized: `searchBranch`'s child for each name (the last element whose key is
/// not above it, else the first) and the rightmost.
fn branch(page: &[u8]) -> Option<Branch> {
    let count = usize::from(u16_at(page, 10)?);
    let mut elements = Vec::with_capacity(count);
    for i in 0..count {
        let e = PAGE_HEADER + i * ELEMENT;
        let (pos, ksize) = (u32_at(page, e)? as usize, u32_at(page, e + 4)? as usize);
        elements.push((page.get(e + pos..e + pos + ksize)?, u64_at(page, e + 8)?));
    }
    let last = elements.last()?.1;
    let named = NAMES.map(|name| {
        let above = elements.partition_point(|(k, _)| *k < name);
        let exact = elements.get(above).is_some_and(|(k, _)| *k == name);
        let at = if exact {
            above
        } else {
            above.saturating_sub(1)
        };
        elements[at].1
    });
    Some(Branch { last, named })
}

impl SnapshotRevision {
    pub fn feed(&mut self, chunk: &[u8]) {
        if self.broken.is_some() {
            return;
        }
        // Only the database's bytes: the trailer (and anything after) is not a page.
        let end = self.meta.map_or(u64::MAX, |m| m.high * m.page_size as u64);
        let room = end.saturating_sub(self.at + self.pending.len() as u64);
        let take = chunk.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        if self.pending.capacity() == 0 {
            self.pending.reserve(PENDING);
        }
        self.pending.extend_from_slice(&chunk[..take]);
        if let Err(e) = self.summarize() {
            self.broken = Some(e);
            self.pending = Vec::new();
        }
    }

    fn summarize(&mut self) -> Result<(), String> {
        let meta = match self.meta {
            Some(m) => m,
            None if self.pending.len() < PAGE_HEADER + 64 => return Ok(()),
            None => {
                let m = meta(&self.pending)?;
                // Past any database etcd can hold (its quota's maximum is 8 GiB; bbolt's own
                // limit is far above): a file that says so is not read.
                if m.high
                    .checked_mul(m.page_size as u64)
                    .is_none_or(|b| b > MAX_FILE)
                {
                    return Err(format!("{} pages of {} bytes", m.high, m.page_size));
                }
                // Every page's summary in one allocation, made once: a vector doubling as it
                // goes frees blocks glibc then counts against its mmap threshold, and the
                // upload's part buffers stayed on the heap (`make bench`: 33 MiB at peak, not
                // 25). Address space only: a page's 8 bytes are touched as it passes.
                let _ = self.leaves.try_reserve_exact(m.high as usize);
                self.meta = Some(m);
                m
            }
        };
        let size = meta.page_size;
        loop {
            if self.next >= meta.high {
                self.pending = Vec::new();
                return Ok(());
            }
            let start = (self.next * size as u64 - self.at) as usize;
            let Some(header) = self.pending.get(start..start + PAGE_HEADER) else {
                break;
            };
            let (id, flags) = (u64_at(header, 0).unwrap(), u16_at(header, 8).unwrap());
            let (count, overflow) = (u16_at(header, 10).unwrap(), u32_at(header, 12).unwrap());
            let count = usize::from(count);
            let run = (u64::from(overflow) + 1) * size as u64;
            // A page of a tree names itself (bbolt writes its id, `tx.allocate`); the bytes of a
            // value's overflow, passing as a page here, almost never do.
            let fits = id == self.next
                && self.next + u64::from(overflow) < meta.high
                && run <= MAX_RUN as u64
                && PAGE_HEADER + count * ELEMENT <= run as usize;
            let mut summary = NOT_A_LEAF;
            if fits && matches!(flags, LEAF | BRANCH) {
                let Some(head) = self
                    .pending
                    .get(start..start + PAGE_HEADER + count * ELEMENT)
                else {
                    break;
                };
                let need = needs(head, flags, run as usize).unwrap_or(0);
                let Some(page) = self.pending.get(start..start + need) else {
                    break;
                };
                if flags == BRANCH {
                    if let Some(b) = branch(page) {
                        self.branches.insert(self.next, b);
                    }
                } else if let Some(l) = leaf(page) {
                    summary = l.last;
                    if l.has_names() {
                        self.named.insert(self.next, l);
                    }
                }
            }
            self.leaves.push(summary);
            self.next += 1;
        }
        // Keep only the pages not yet summarized.
        let done = (self.next * size as u64 - self.at) as usize;
        let done = done.min(self.pending.len());
        self.pending.drain(..done);
        self.at += done as u64;
        Ok(())
    }

    /// The leaf the walk from `page` reaches, by each branch's child for `name` (or its
    /// rightmost child).
    fn descend(&self, mut page: u64, name: Option<usize>) -> Result<u64, String> {
        for _ in 0..MAX_DEPTH {
            if let Some(b) = self.branches.get(&page) {
                page = name.map_or(b.last, |n| b.named[n]);
                continue;
            }
            return match self.leaves.get(page as usize) {
                Some(&last) if last != NOT_A_LEAF => Ok(page),
                _ => Err(format!("page {page} of the tree is no page read")),
            };
        }
        Err("the tree is deeper than any bbolt tree".into())
    }

    /// The last revision and the compaction marks of the leaf of `bucket` where `name` would be.
    fn bucket_leaf(
        &self,
        bucket: &Bucket,
        name: Option<usize>,
    ) -> Result<(u64, [Option<u64>; 2]), String> {
        match bucket {
            Bucket::Inline(leaf) => Ok((leaf.last, leaf.marks)),
            Bucket::Root(root) => {
                let page = self.descend(*root, name)?;
                let marks = self.named.get(&page).map_or([None, None], |l| l.marks);
                Ok((self.leaves[page as usize], marks))
            }
        }
    }

    /// The revision etcd would restore the snapshot at; the error says why it cannot be read
    /// (never the data).
    pub fn revision(&self) -> Result<i64, String> {
        if let Some(e) = &self.broken {
            return Err(e.clone());
        }
        let meta = self
            .meta
            .ok_or("the stream ended before bbolt's meta page")?;
        if self.next < meta.high {
            return Err(format!(
                "the stream ended at page {} of {}",
                self.next, meta.high
            ));
        }
        let bucket = |name: usize| -> Result<&Bucket, String> {
            let page = self.descend(meta.root, Some(name))?;
            self.named
                .get(&page)
                .and_then(|l| l.buckets[name].as_ref())
                .ok_or_else(|| format!("no `{}` bucket", String::from_utf8_lossy(NAMES[name])))
        };
        let (last, _) = self.bucket_leaf(bucket(KEY)?, None)?;
        if last == NOT_A_REVISION {
            return Err("the `key` bucket's last key is no revision".into());
        }
        let meta_bucket = bucket(META_BUCKET)?;
        let finished = self.bucket_leaf(meta_bucket, Some(FINISHED))?.1[0];
        let scheduled = self.bucket_leaf(meta_bucket, Some(SCHEDULED))?.1[1];
        // A store with no key yet is at revision 1 (`restoreIntoIndex`).
        let revision = [Some(1), Some(last), finished, scheduled]
            .into_iter()
            .flatten()
            .max()
            .unwrap_or(1);
        i64::try_from(revision).map_err(|_| format!("revision {revision}"))
    }
}

#[cfg(test)]
#[path = "bolt_tests.rs"]
mod tests;
