//! Sending only the layers a node lacks. `docker load` reads a layer's file from the archive
//! only when the node does not already hold that layer with the same parents (its chain), so
//! an archive without the files of the layers every receiver already has loads the same image.
//! Here: which leading layers the receivers share with the image ([`present_prefix`]), the
//! layer files of an archive ([`manifest_layers`]), and a streaming tar filter that drops
//! those files ([`filter_tar`]). No Docker calls here; the caller runs `docker save`.

use std::collections::HashSet;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// How many leading layers of `want` (the image's layer diff IDs, bottom first) every receiver
/// holds as the same chain: the longest prefix of `want` that each receiver has as a prefix
/// of one of its images' layer lists (the smallest over receivers; 0 without receivers).
pub fn present_prefix(want: &[String], receivers: &[Vec<Vec<String>>]) -> usize {
    receivers
        .iter()
        .map(|images| {
            images
                .iter()
                .map(|have| want.iter().zip(have).take_while(|(a, b)| a == b).count())
                .max()
                .unwrap_or(0)
        })
        .min()
        .unwrap_or(0)
}

#[derive(Debug, thiserror::Error)]
pub enum LayerError {
    #[error("the image archive: {0}")]
    Archive(String),
    #[error("the image archive: {0}")]
    Io(#[from] std::io::Error),
}

/// The layer files of the first image in a `docker save` manifest.json, bottom layer first.
pub fn manifest_layers(manifest: &[u8]) -> Result<Vec<String>, LayerError> {
    #[derive(serde::Deserialize)]
    struct Entry {
        #[serde(rename = "Layers")]
        layers: Vec<String>,
    }
    let entries: Vec<Entry> = serde_json::from_slice(manifest)
        .map_err(|e| LayerError::Archive(format!("manifest.json: {e}")))?;
    entries
        .into_iter()
        .next()
        .map(|e| e.layers)
        .ok_or_else(|| LayerError::Archive("manifest.json lists no image".into()))
}

const BLOCK: usize = 512;

/// One tar header's facts: the entry's name and the size of the data after it.
fn header_facts(h: &[u8; BLOCK]) -> Result<(String, u64, u8), LayerError> {
    let field = |r: std::ops::Range<usize>| {
        let f = &h[r];
        let end = f.iter().position(|&b| b == 0).unwrap_or(f.len());
        String::from_utf8_lossy(&f[..end]).into_owned()
    };
    let size_field = &h[124..136];
    let size = if size_field[0] & 0x80 != 0 {
        // base-256 (GNU) for sizes beyond the octal field
        size_field[1..].iter().fold(0u64, |acc, &b| {
            acc.saturating_mul(256).saturating_add(b as u64)
        })
    } else {
        let text = field(124..136);
        let text = text.trim_matches(|c: char| c == ' ' || c == '\0');
        if text.is_empty() {
            0
        } else {
            u64::from_str_radix(text, 8)
                .map_err(|_| LayerError::Archive(format!("a tar header's size `{text}`")))?
        }
    };
    let mut name = field(0..100);
    if &h[257..262] == b"ustar" {
        let prefix = field(345..500);
        if !prefix.is_empty() {
            name = format!("{prefix}/{name}");
        }
    }
    Ok((name, size, h[156]))
}

/// `path=` in a PAX extended header's records (`LEN path=VALUE\n`...).
fn pax_path(records: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(records);
    text.lines().find_map(|r| {
        let (_, kv) = r.split_once(' ')?;
        kv.strip_prefix("path=").map(str::to_string)
    })
}

/// What [`filter_tar`] passed on and dropped.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Filtered {
    pub bytes_out: u64,
    pub dropped_files: usize,
    pub dropped_bytes: u64,
    /// manifest.json's content when `capture_manifest` was asked for.
    pub manifest: Option<Vec<u8>>,
}

/// Copies a tar stream from `input` to `output` (if any) without the entries named in `drop`
/// (with any PAX or GNU long-name header that belongs to them); keeps manifest.json's bytes
/// when `capture_manifest`. Streams: holds one entry's header, never a file.
pub async fn filter_tar<R, W>(
    mut input: R,
    mut output: Option<W>,
    drop: &HashSet<String>,
    capture_manifest: bool,
) -> Result<Filtered, LayerError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut out = Filtered::default();
    let mut pending: Vec<u8> = Vec::new(); // headers (and their data) waiting for their entry
    let mut long_name: Option<String> = None;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let mut h = [0u8; BLOCK];
        if !read_full(&mut input, &mut h).await? {
            break; // a stream without end blocks: nothing more to copy
        }
        if h.iter().all(|&b| b == 0) {
            // the end: copy it and whatever follows as it is
            write(&mut output, &mut out, &pending).await?;
            write(&mut output, &mut out, &h).await?;
            loop {
                let n = input.read(&mut buf).await?;
                if n == 0 {
                    break;
                }
                write(&mut output, &mut out, &buf[..n]).await?;
            }
            break;
        }
        let (name, size, kind) = header_facts(&h)?;
        let padded = size.div_ceil(BLOCK as u64) * BLOCK as u64;
        if matches!(kind, b'x' | b'L') {
            // describes the next entry: held back with it
            let data = read_exact_vec(&mut input, padded).await?;
            let records = &data[..size as usize];
            long_name = if kind == b'x' {
                pax_path(records).or(long_name)
            } else {
                let end = records
                    .iter()
                    .position(|&b| b == 0)
                    .unwrap_or(records.len());
                Some(String::from_utf8_lossy(&records[..end]).into_owned())
            };
            pending.extend_from_slice(&h);
            pending.extend_from_slice(&data);
            continue;
        }
        let name = long_name.take().unwrap_or(name);
        let name = name.trim_start_matches("./").to_string();
        if drop.contains(&name) {
            out.dropped_files += 1;
            out.dropped_bytes += size;
            pending.clear();
            skip(&mut input, padded, &mut buf).await?;
            continue;
        }
        write(&mut output, &mut out, &pending).await?;
        pending.clear();
        write(&mut output, &mut out, &h).await?;
        if capture_manifest && name == "manifest.json" && size <= 16 << 20 {
            let data = read_exact_vec(&mut input, padded).await?;
            out.manifest = Some(data[..size as usize].to_vec());
            write(&mut output, &mut out, &data).await?;
            continue;
        }
        let mut left = padded;
        while left > 0 {
            let want = left.min(buf.len() as u64) as usize;
            let n = input.read(&mut buf[..want]).await?;
            if n == 0 {
                return Err(LayerError::Archive(format!("`{name}` is cut short")));
            }
            write(&mut output, &mut out, &buf[..n]).await?;
            left -= n as u64;
        }
    }
    if let Some(w) = output.as_mut() {
        w.flush().await?;
        w.shutdown().await?;
    }
    Ok(out)
}

async fn write<W: AsyncWrite + Unpin>(
    output: &mut Option<W>,
    out: &mut Filtered,
    bytes: &[u8],
) -> Result<(), LayerError> {
    if let Some(w) = output.as_mut() {
        w.write_all(bytes).await?;
    }
    out.bytes_out += bytes.len() as u64;
    Ok(())
}

/// Fills `block`; false at a clean end of the stream before its first byte.
async fn read_full<R: AsyncRead + Unpin>(
    input: &mut R,
    block: &mut [u8],
) -> Result<bool, LayerError> {
    let mut got = 0;
    while got < block.len() {
        let n = input.read(&mut block[got..]).await?;
        if n == 0 {
            if got == 0 {
                return Ok(false);
            }
            return Err(LayerError::Archive("a tar header is cut short".into()));
        }
        got += n;
    }
    Ok(true)
}

async fn read_exact_vec<R: AsyncRead + Unpin>(
    input: &mut R,
    len: u64,
) -> Result<Vec<u8>, LayerError> {
    if len > 64 << 20 {
        return Err(LayerError::Archive(format!(
            "a tar header block of {len} bytes"
        )));
    }
    let mut data = vec![0u8; len as usize];
    if !read_full(input, &mut data).await? && len > 0 {
        return Err(LayerError::Archive("an entry is cut short".into()));
    }
    Ok(data)
}

async fn skip<R: AsyncRead + Unpin>(
    input: &mut R,
    mut left: u64,
    buf: &mut [u8],
) -> Result<(), LayerError> {
    while left > 0 {
        let want = left.min(buf.len() as u64) as usize;
        let n = input.read(&mut buf[..want]).await?;
        if n == 0 {
            return Err(LayerError::Archive("an entry is cut short".into()));
        }
        left -= n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(name: &str, size: usize, kind: u8) -> [u8; BLOCK] {
        let mut h = [0u8; BLOCK];
        h[..name.len()].copy_from_slice(name.as_bytes());
        let s = format!("{size:011o}\0");
        h[124..136].copy_from_slice(s.as_bytes());
        h[156] = kind;
        h[257..263].copy_from_slice(b"ustar\0");
        h
    }

    fn entry(name: &str, data: &[u8]) -> Vec<u8> {
        let mut v = header(name, data.len(), b'0').to_vec();
        v.extend_from_slice(data);
        v.resize(v.len().div_ceil(BLOCK) * BLOCK, 0);
        v
    }

    fn archive(entries: &[Vec<u8>]) -> Vec<u8> {
        let mut v: Vec<u8> = entries.concat();
        v.extend_from_slice(&[0u8; 2 * BLOCK]);
        v
    }

    fn names(tar: &[u8]) -> Vec<String> {
        let mut at = 0;
        let mut found = Vec::new();
        while at + BLOCK <= tar.len() {
            let h: [u8; BLOCK] = tar[at..at + BLOCK].try_into().unwrap();
            if h.iter().all(|&b| b == 0) {
                break;
            }
            let (name, size, _) = header_facts(&h).unwrap();
            found.push(name);
            at += BLOCK + (size as usize).div_ceil(BLOCK) * BLOCK;
        }
        found
    }

    fn run(input: &[u8], drop: &[&str]) -> (Vec<u8>, Filtered) {
        let drop: HashSet<String> = drop.iter().map(|s| s.to_string()).collect();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut out = Vec::new();
        let f = rt
            .block_on(filter_tar(input, Some(&mut out), &drop, true))
            .unwrap();
        (out, f)
    }

    #[test]
    fn the_layers_every_receiver_holds_are_dropped_and_the_rest_is_byte_identical() {
        let manifest =
            br#"[{"Config":"c.json","RepoTags":["img:1"],"Layers":["a/layer.tar","b/layer.tar"]}]"#;
        let big = vec![7u8; 3 * BLOCK + 17];
        let tar = archive(&[
            entry("a/VERSION", b"1.0"),
            entry("a/layer.tar", &big),
            entry("b/layer.tar", b"top layer"),
            entry("c.json", b"{}"),
            entry("manifest.json", manifest),
        ]);
        // nothing dropped: the very same bytes
        let (same, f) = run(&tar, &[]);
        assert_eq!(same, tar);
        assert_eq!(f.bytes_out, tar.len() as u64);
        assert_eq!(
            manifest_layers(&f.manifest.unwrap()).unwrap(),
            ["a/layer.tar", "b/layer.tar"]
        );
        // the bottom layer dropped
        let (out, f) = run(&tar, &["a/layer.tar"]);
        assert_eq!(
            names(&out),
            ["a/VERSION", "b/layer.tar", "c.json", "manifest.json"]
        );
        assert_eq!(f.dropped_files, 1);
        assert_eq!(f.dropped_bytes, big.len() as u64);
        assert_eq!(out.len(), tar.len() - BLOCK - 4 * BLOCK);
        assert!(out.ends_with(&[0u8; 2 * BLOCK]));
    }

    #[test]
    fn a_long_name_header_goes_with_its_entry() {
        let long = format!("{}/layer.tar", "d".repeat(120));
        let mut pax = header("PaxHeaders/x", 0, b'x').to_vec();
        let record = format!("path={long}\n");
        let line = format!("{} {record}", record.len() + 4);
        assert_eq!(line.len(), record.len() + 4);
        pax[124..136].copy_from_slice(format!("{:011o}\0", line.len()).as_bytes());
        pax.extend_from_slice(line.as_bytes());
        pax.resize(pax.len().div_ceil(BLOCK) * BLOCK, 0);
        let tar = archive(&[pax, entry("truncated-name", b"layer"), entry("keep", b"k")]);
        let (out, f) = run(&tar, &[&long]);
        assert_eq!(names(&out), ["keep"]);
        assert_eq!(f.dropped_files, 1);
    }

    #[test]
    fn a_damaged_archive_is_an_error_not_a_short_image() {
        let tar = archive(&[entry("a/layer.tar", &[1u8; 2000])]);
        let cut = &tar[..BLOCK + 100];
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut out = Vec::new();
        let e = rt
            .block_on(filter_tar(cut, Some(&mut out), &HashSet::new(), false))
            .unwrap_err();
        assert!(e.to_string().contains("cut short"), "{e}");
        let mut bad = tar.clone();
        bad[124..136].copy_from_slice(b"zz\0\0\0\0\0\0\0\0\0\0");
        let e = rt
            .block_on(filter_tar(&bad[..], Some(&mut out), &HashSet::new(), false))
            .unwrap_err();
        assert!(e.to_string().contains("size"), "{e}");
        assert!(manifest_layers(b"[]").is_err());
        assert!(manifest_layers(b"not json").is_err());
    }

    #[test]
    fn the_shared_prefix_is_the_smallest_over_receivers() {
        let want: Vec<String> = ["l1", "l2", "l3"].map(String::from).to_vec();
        let img = |ls: &[&str]| ls.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // the master has an older build sharing two layers, a worker the first only
        let master = vec![img(&["l1", "l2", "old"]), img(&["x"])];
        let worker = vec![img(&["l1"])];
        assert_eq!(present_prefix(&want, std::slice::from_ref(&master)), 2);
        assert_eq!(present_prefix(&want, &[master, worker]), 1);
        // same layers under other parents are not the same chain
        assert_eq!(present_prefix(&want, &[vec![img(&["l2", "l3"])]]), 0);
        assert_eq!(present_prefix(&want, &[vec![]]), 0);
        assert_eq!(present_prefix(&want, &[]), 0);
    }
}
