//! `pull`: a folder or file below /shared on the master into a local one: the master's
//! manifest against the local tree, deletions and mode-only changes done here, then one
//! stream of what is missing from `tree_sync.py send` (zstd when the master says `Z`).

use super::*;

/// The nearest folder that exists at or above `path` (where its bytes would land).
fn existing_ancestor(path: &Path) -> PathBuf {
    let mut p = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    while !p.exists() {
        if !p.pop() {
            return PathBuf::from("/");
        }
    }
    p
}

/// `remote` on the master into a local folder or file.
pub async fn pull(
    ssh: &Ssh,
    remote: &SharedPath,
    local_root: &Path,
    opts: &Options,
    progress: &Progress,
) -> Result<Summary, TransferError> {
    let started = Instant::now();
    let excludes = Excludes::new(&opts.excludes)?;
    let there = manifest(ssh, remote.as_str(), opts.checksum).await?;
    let is_file = match (there.kind, there.other) {
        (RootKind::Dir, false) => false,
        (RootKind::File, false) => true,
        _ => {
            return Err(TransferError::Refused(format!(
                "{remote}: no such file or folder on the cluster"
            )))
        }
    };
    // A file fetched into a folder that exists lands in it under its own name.
    let mut local_root = local_root.to_path_buf();
    if is_file && local_root.is_dir() {
        local_root.push(remote.name());
    }
    let here = tree::root_kind(&local_root)?;
    match (is_file, here) {
        (true, RootKind::Dir) => {
            return Err(TransferError::Refused(format!(
                "{} is a folder here",
                tree::shown_path(&local_root)
            )))
        }
        (false, RootKind::File) => {
            return Err(TransferError::Refused(format!(
                "{} is a file here: a folder cannot replace it",
                tree::shown_path(&local_root)
            )))
        }
        _ => {}
    }
    let source: Vec<Entry> = there
        .entries
        .into_iter()
        .filter(|e| !excludes.excludes(&e.path, e.kind == diff::EntryKind::Dir))
        .collect();
    let dest = if here == RootKind::Missing {
        Vec::new()
    } else {
        if !is_file {
            stream::sweep_parts(&local_root)?;
        }
        let root = local_root.clone();
        let patterns = opts.excludes.clone();
        let checksum = opts.checksum;
        tokio::task::spawn_blocking(move || {
            let excludes = Excludes::new(&patterns)?;
            tree::scan(
                &root,
                &ScanOptions {
                    ignore_files: false,
                    excludes: &excludes,
                    hashes: checksum,
                },
            )
        })
        .await
        .map_err(|e| TransferError::Local(format!("reading the folder: {e}")))??
    };
    let changes = diff::changes(&source, &dest, opts.delete, opts.checksum);
    let landing = existing_ancestor(&local_root);
    let free = fs4::available_space(&landing)
        .map_err(|e| tree::local(&landing, "read the free space of", e))?;
    if changes.bytes > free {
        return Err(TransferError::Refused(format!(
            "no room: {} file(s), {:.1} MB to fetch, {:.1} MB free in {}; nothing was fetched",
            changes.files,
            changes.bytes as f64 / 1e6,
            free as f64 / 1e6,
            tree::shown_path(&landing)
        )));
    }
    let mut summary = summary_of(
        "pulled",
        remote.to_string(),
        tree::shown_path(&local_root),
        &changes,
    );
    if !is_file {
        std::fs::create_dir_all(&local_root)
            .map_err(|e| tree::local(&local_root, "make the folder", e))?;
    }
    // What needs no bytes from the master is done here: deletions, modes and times.
    let mut dest_tree = LocalDest::new(local_root.clone(), is_file);
    let mut request = Vec::new();
    let mut root_record = Record::new(Kind::Root, remote.as_str().as_bytes());
    root_record.mode = u32::from(is_file)
        | if opts.no_compress || !local_has_zstd() {
            0
        } else {
            2
        };
    root_record.encode(&mut request);
    let mut wanted = 0;
    for action in &changes.actions {
        match action {
            Action::Delete(p) => stream::delete(&mut dest_tree, p)?,
            Action::Attrs(e) => stream::set_attrs(&mut dest_tree, &e.path, e.mode, e.mtime_ns)?,
            Action::Dir(e) | Action::Link(e) | Action::File(e) => {
                Record::new(e.record().kind, &e.path).encode(&mut request);
                wanted += 1;
            }
        }
    }
    Record::end().encode(&mut request);
    if wanted == 0 {
        summary.secs = started.elapsed().as_secs_f64();
        return Ok(summary);
    }
    let counters = Arc::new(Counters::default());
    let mut child = ssh
        .session()
        .raw_command(tree_sync("send"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .await
        .map_err(|e| remote_io(ssh, "send", &e))?;
    let stdin = child.stdin().take();
    let stderr = child.stderr().take();
    let stdout = child
        .stdout()
        .take()
        .ok_or_else(|| remote_io(ssh, "send", &"no output"))?
        .into_owned_fd()
        .map_err(|e| remote_io(ssh, "send", &e))?;
    let receiver = {
        let counters = counters.clone();
        tokio::task::spawn_blocking(move || {
            let mut input = std::fs::File::from(stdout);
            let mut how = [0u8; 1];
            std::io::Read::read_exact(&mut input, &mut how).map_err(|e| {
                TransferError::Remote(format!("the master's stream did not start: {e}"))
            })?;
            match &how {
                b"Z" => {
                    let mut z = std::process::Command::new("zstd")
                        .args(["-d", "-q", "-c"])
                        .stdin(std::process::Stdio::from(OwnedFd::from(input)))
                        .stdout(std::process::Stdio::piped())
                        .spawn()
                        .map_err(|e| TransferError::Local(format!("cannot start zstd: {e}")))?;
                    let mut out = z
                        .stdout
                        .take()
                        .ok_or_else(|| TransferError::Local("zstd gave no output".into()))?;
                    let mut buffered = std::io::BufReader::with_capacity(1 << 20, &mut out);
                    let got = stream::apply_stream(&mut buffered, &mut dest_tree, &counters);
                    drop(buffered);
                    drop(out);
                    let _ = z.wait();
                    got.map(|v| (v, true))
                }
                b"P" => {
                    let mut buffered = std::io::BufReader::with_capacity(1 << 20, input);
                    stream::apply_stream(&mut buffered, &mut dest_tree, &counters)
                        .map(|v| (v, false))
                }
                other => Err(TransferError::Remote(format!(
                    "the master's stream starts with {other:?}, not Z or P"
                ))),
            }
        })
    };
    let send_request = async {
        if let Some(mut stdin) = stdin {
            stdin.write_all(&request).await?;
            stdin.shutdown().await?;
        }
        Ok::<(), std::io::Error>(())
    };
    let errors = async {
        let mut buf = Vec::new();
        if let Some(mut stderr) = stderr {
            let _ = stderr.read_to_end(&mut buf).await;
        }
        buf
    };
    let (sent, received, errors) = with_progress(
        progress,
        "pull",
        changes.files,
        changes.bytes,
        &counters,
        async { tokio::join!(send_request, receiver, errors) },
    )
    .await;
    let status = child.wait().await.map_err(|e| remote_io(ssh, "send", &e))?;
    if !status.success() {
        return Err(remote_failed(ssh, "send", status.code(), &errors));
    }
    sent.map_err(|e| remote_io(ssh, "send", &e))?;
    let (vanished, compressed) =
        received.map_err(|e| TransferError::Local(format!("the receiver: {e}")))??;
    summary.files = counters.files.load(Ordering::Relaxed);
    summary.bytes = counters.bytes.load(Ordering::Relaxed);
    summary.compressed = compressed;
    summary.vanished = vanished.iter().map(|p| shown_bytes(p)).collect();
    summary.secs = started.elapsed().as_secs_f64();
    Ok(summary)
}
