//! bbolt files built page by page, as bbolt lays them out, read in every chunking.

use super::*;

const PS: usize = 4096;

fn rev(main: u64) -> Vec<u8> {
    let mut k = main.to_be_bytes().to_vec();
    k.push(b'_');
    k.extend_from_slice(&0u64.to_be_bytes());
    k
}

fn tombstone(main: u64) -> Vec<u8> {
    let mut k = rev(main);
    k.push(b't');
    k
}

fn header(id: u64, flags: u16, count: usize, overflow: u32) -> Vec<u8> {
    let mut p = id.to_le_bytes().to_vec();
    p.extend_from_slice(&flags.to_le_bytes());
    p.extend_from_slice(&(count as u16).to_le_bytes());
    p.extend_from_slice(&overflow.to_le_bytes());
    p
}

/// A leaf page's bytes (`pages` pages long, or just long enough with 0): elements, then each
/// key and value, positions relative to their element.
fn leaf_page(id: u64, entries: &[(u32, Vec<u8>, Vec<u8>)], pages: usize) -> Vec<u8> {
    let overflow = pages.saturating_sub(1) as u32;
    let mut p = header(id, LEAF, entries.len(), overflow);
    let mut data = Vec::new();
    let base = PAGE_HEADER + entries.len() * ELEMENT;
    for (i, (flags, k, v)) in entries.iter().enumerate() {
        let pos = base + data.len() - (PAGE_HEADER + i * ELEMENT);
        for n in [*flags, pos as u32, k.len() as u32, v.len() as u32] {
            p.extend_from_slice(&n.to_le_bytes());
        }
        data.extend_from_slice(k);
        data.extend_from_slice(v);
    }
    p.extend_from_slice(&data);
    if pages > 0 {
        assert!(
            p.len() <= pages * PS,
            "leaf {id} overflows its {pages} pages"
        );
        p.resize(pages * PS, 0);
    }
    p
}

fn branch_page(id: u64, children: &[(Vec<u8>, u64)]) -> Vec<u8> {
    let mut p = header(id, BRANCH, children.len(), 0);
    let mut data = Vec::new();
    let base = PAGE_HEADER + children.len() * ELEMENT;
    for (i, (k, child)) in children.iter().enumerate() {
        let pos = base + data.len() - (PAGE_HEADER + i * ELEMENT);
        p.extend_from_slice(&(pos as u32).to_le_bytes());
        p.extend_from_slice(&(k.len() as u32).to_le_bytes());
        p.extend_from_slice(&child.to_le_bytes());
        data.extend_from_slice(k);
    }
    p.extend_from_slice(&data);
    p.resize(PS, 0);
    p
}

fn meta_page(id: u64, root: u64, high: u64) -> Vec<u8> {
    let mut m = Vec::new();
    for n in [MAGIC, VERSION, PS as u32, 0] {
        m.extend_from_slice(&n.to_le_bytes());
    }
    // root, sequence, freelist, high-water mark, txid
    for n in [root, 0, 2, high, 9 - id] {
        m.extend_from_slice(&n.to_le_bytes());
    }
    m.extend_from_slice(&fnv64a(&m).to_le_bytes());
    let mut p = header(id, META, 0, 0);
    p.extend_from_slice(&m);
    p.resize(PS, 0);
    p
}

fn bucket(root: u64) -> (u32, Vec<u8>) {
    let mut v = root.to_le_bytes().to_vec();
    v.extend_from_slice(&0u64.to_le_bytes());
    (BUCKET_LEAF, v)
}

fn inline(entries: &[(u32, Vec<u8>, Vec<u8>)]) -> (u32, Vec<u8>) {
    let (flags, mut v) = bucket(0);
    v.extend_from_slice(&leaf_page(0, entries, 0));
    (flags, v)
}

fn named(name: &str, (flags, value): (u32, Vec<u8>)) -> (u32, Vec<u8>, Vec<u8>) {
    (flags, name.as_bytes().to_vec(), value)
}

fn mark(name: &str, main: u64) -> (u32, Vec<u8>, Vec<u8>) {
    (0, name.as_bytes().to_vec(), rev(main))
}

fn kv(key: Vec<u8>, value: &[u8]) -> (u32, Vec<u8>, Vec<u8>) {
    (0, key, value.to_vec())
}

/// The stream `WriteTo` and etcd send: both meta pages, every page below the high-water mark
/// (free ones as junk, or as stale leaves), then a 32-byte trailer.
fn stream(root: u64, pages: Vec<(u64, Vec<u8>)>) -> Vec<u8> {
    let high = pages
        .iter()
        .map(|(id, p)| id + (p.len() / PS) as u64)
        .max()
        .unwrap();
    let mut file = vec![0xa5u8; high as usize * PS];
    file[..PS].copy_from_slice(&meta_page(0, root, high));
    file[PS..2 * PS].copy_from_slice(&meta_page(1, root, high));
    for (id, p) in pages {
        file[id as usize * PS..id as usize * PS + p.len()].copy_from_slice(&p);
    }
    file.extend_from_slice(&[0x5a; 32]);
    file
}

fn read(stream: &[u8], chunk: usize) -> Result<i64, String> {
    let mut r = SnapshotRevision::default();
    for c in stream.chunks(chunk) {
        r.feed(c);
    }
    r.revision()
}

fn read_all_ways(stream: &[u8]) -> Result<i64, String> {
    let whole = read(stream, stream.len());
    for chunk in [1, 13, 4096, 32 * 1024] {
        assert_eq!(read(stream, chunk), whole, "in chunks of {chunk}");
    }
    whole
}

#[test]
fn a_small_store_is_at_its_last_keys_revision() {
    let s = stream(
        2,
        vec![
            (
                2,
                leaf_page(
                    2,
                    &[
                        named("alarm", inline(&[])),
                        named("key", bucket(3)),
                        named("meta", inline(&[mark("finishedCompactRev", 2)])),
                    ],
                    1,
                ),
            ),
            (
                3,
                leaf_page(3, &(1..=5).map(|r| kv(rev(r), b"v")).collect::<Vec<_>>(), 1),
            ),
        ],
    );
    assert_eq!(read_all_ways(&s), Ok(5));
}

#[test]
fn a_tree_is_walked_from_the_snapshots_root_through_pages_before_and_after_it() {
    // The key bucket's root (a branch at page 7) points back at pages 3 and 5; page 6 is a free
    // page still holding a newer leaf (etcd may be rewriting free pages while it streams): never
    // reached, never counted. The newest revision is a tombstone, compacted: the meta bucket's
    // marks are newer than any key.
    let pages = |finished: u64, scheduled: u64| {
        vec![
            (
                2,
                leaf_page(2, &[named("key", bucket(7)), named("meta", bucket(4))], 1),
            ),
            (3, leaf_page(3, &[kv(rev(1), b"a"), kv(rev(3), b"b")], 1)),
            (
                4,
                leaf_page(
                    4,
                    &[
                        kv(b"confState".to_vec(), b"{}"),
                        mark("finishedCompactRev", finished),
                        mark("scheduledCompactRev", scheduled),
                    ],
                    1,
                ),
            ),
            (
                5,
                leaf_page(5, &[kv(rev(4), b"c"), kv(tombstone(9), b"")], 1),
            ),
            (6, leaf_page(6, &[kv(rev(50), b"stale")], 1)),
            (7, branch_page(7, &[(rev(1), 3), (rev(4), 5)])),
            (8, vec![0xff; PS]),
        ]
    };
    assert_eq!(read_all_ways(&stream(2, pages(4, 4))), Ok(9));
    assert_eq!(read_all_ways(&stream(2, pages(12, 12))), Ok(12));
    // A compaction scheduled and not finished (etcd #17780): the scheduled mark counts too.
    assert_eq!(read_all_ways(&stream(2, pages(4, 13))), Ok(13));
}

#[test]
fn a_root_bucket_split_over_pages_and_a_leaf_with_overflow_are_read() {
    // The root bucket is a branch whose children hold `key` and `meta`; the key bucket's last
    // leaf carries a value three pages long (its overflow), its last key after the value.
    let big = vec![b'x'; 2 * PS + 100];
    let s = stream(
        9,
        vec![
            (
                2,
                leaf_page(
                    2,
                    &[named("alarm", inline(&[])), named("key", bucket(3))],
                    1,
                ),
            ),
            (
                3,
                leaf_page(3, &[kv(rev(19), &big), kv(rev(20), b"last")], 3),
            ),
            (
                6,
                leaf_page(
                    6,
                    &[named("lease", inline(&[])), named("meta", inline(&[]))],
                    1,
                ),
            ),
            (
                9,
                branch_page(9, &[(b"alarm".to_vec(), 2), (b"lease".to_vec(), 6)]),
            ),
        ],
    );
    assert_eq!(read_all_ways(&s), Ok(20));
}

#[test]
fn an_empty_store_is_at_revision_one() {
    let s = stream(
        2,
        vec![(
            2,
            leaf_page(
                2,
                &[named("key", inline(&[])), named("meta", inline(&[]))],
                1,
            ),
        )],
    );
    assert_eq!(read_all_ways(&s), Ok(1));
}

#[test]
fn a_file_that_cannot_be_read_says_why_and_gives_no_revision() {
    let good = stream(
        2,
        vec![
            (
                2,
                leaf_page(2, &[named("key", bucket(3)), named("meta", inline(&[]))], 1),
            ),
            (3, leaf_page(3, &[kv(rev(7), b"v")], 1)),
        ],
    );
    assert_eq!(read_all_ways(&good), Ok(7));
    let broken = |at: usize, byte: u8| {
        let mut s = good.clone();
        s[at] = byte;
        read(&s, 4096).unwrap_err()
    };
    assert!(
        broken(16, 0).contains("not a bbolt file"),
        "{}",
        broken(16, 0)
    );
    assert!(broken(16 + 30, 1).contains("checksum"));
    // The key bucket's root is not a leaf or a branch (its flags overwritten).
    assert!(
        broken(3 * PS + 8, 0x10).contains("page 3"),
        "{}",
        broken(3 * PS + 8, 0x10)
    );
    // It does not name itself (a value's bytes passing as a page).
    assert!(
        broken(3 * PS, 9).contains("page 3"),
        "{}",
        broken(3 * PS, 9)
    );
    // Its last key is no revision.
    assert!(broken(3 * PS + 32 + 8, b'x').contains("no revision"));
    let e = read(&good[..3 * PS], 4096).unwrap_err();
    assert!(e.contains("ended at page 3 of 4"), "{e}");
    assert!(read(&good[..40], 7)
        .unwrap_err()
        .contains("before bbolt's meta page"));
    let e = read(
        &stream(2, vec![(2, leaf_page(2, &[named("meta", inline(&[]))], 1))]),
        4096,
    );
    assert!(e.unwrap_err().contains("no `key` bucket"));
}

#[test]
fn a_branch_leads_to_a_name_it_holds_exactly_and_to_its_first_child_for_a_name_before_it() {
    let keys = (3, leaf_page(3, &[kv(rev(30), b"v")], 1));
    // `key` and `meta` are the branch's own keys.
    let exact = stream(
        6,
        vec![
            keys.clone(),
            (
                4,
                leaf_page(
                    4,
                    &[named("key", bucket(3)), named("lease", inline(&[]))],
                    1,
                ),
            ),
            (
                5,
                leaf_page(
                    5,
                    &[named("meta", inline(&[mark("finishedCompactRev", 31)]))],
                    1,
                ),
            ),
            (
                6,
                branch_page(6, &[(b"key".to_vec(), 4), (b"meta".to_vec(), 5)]),
            ),
        ],
    );
    assert_eq!(read_all_ways(&exact), Ok(31));
    // `key` sorts before the branch's first key (`lease`): its first child holds it.
    let before = stream(
        6,
        vec![
            keys,
            (
                4,
                leaf_page(
                    4,
                    &[named("key", bucket(3)), named("lease", inline(&[]))],
                    1,
                ),
            ),
            (5, leaf_page(5, &[named("meta", inline(&[]))], 1)),
            (
                6,
                branch_page(6, &[(b"lease".to_vec(), 4), (b"meta".to_vec(), 5)]),
            ),
        ],
    );
    assert_eq!(read_all_ways(&before), Ok(30));
}

#[test]
fn a_crafted_file_is_refused_without_recursing_or_reading_past_its_pages() {
    // Inline buckets nested 6 000 deep (bbolt never nests them): read one level, no deeper.
    let mut nested = inline(&[kv(rev(5), b"v")]);
    for _ in 0..6_000 {
        nested = inline(&[named("key", nested)]);
    }
    let pages = nested.1.len() / PS + 2;
    let s = stream(
        2,
        vec![(
            2,
            leaf_page(
                2,
                &[named("key", nested), named("meta", inline(&[]))],
                pages,
            ),
        )],
    );
    assert!(read(&s, 32 * 1024).unwrap_err().contains("no revision"));
    // The key bucket's root claims an overflow past the file's last page.
    let mut past = leaf_page(3, &[kv(rev(9), b"v")], 1);
    past[12..16].copy_from_slice(&7u32.to_le_bytes());
    let s = stream(
        2,
        vec![
            (
                2,
                leaf_page(2, &[named("key", bucket(3)), named("meta", inline(&[]))], 1),
            ),
            (3, past),
        ],
    );
    assert!(read_all_ways(&s).unwrap_err().contains("page 3"));
    // A free page at the file's end claiming more elements than a page holds: never waited for.
    let mut junk = header(4, LEAF, 0xffff, 0);
    junk.resize(PS, 0);
    let s = stream(
        2,
        vec![
            (
                2,
                leaf_page(2, &[named("key", bucket(3)), named("meta", inline(&[]))], 1),
            ),
            (3, leaf_page(3, &[kv(rev(9), b"v")], 1)),
            (4, junk),
        ],
    );
    assert_eq!(read_all_ways(&s), Ok(9));
    // A meta page that says the file is larger than any database.
    let huge = meta_page(0, 2, 1 << 40);
    let e = read(&huge, 4096).unwrap_err();
    assert!(e.contains("pages of 4096 bytes"), "{e}");
}
