//! Who gets the image from whom: a tree rooted at the master in which every node that is
//! receiving the image passes it on to at most [`DEGREE`] others as the bytes arrive (see
//! `templates/node/image_fetch.py`). The master's card then carries [`DEGREE`] copies, not one
//! per worker, and the tree is `log N` deep; because every hop is pipelined, the whole tree
//! fills in about the time of one transfer plus a chunk's delay per level. Pure: no I/O.

/// Children per node. Two keeps each card at two outgoing copies (a node's own `docker load`
/// is the slow reader that paces its subtree anyway) and the tree `log2 N` deep.
pub const DEGREE: usize = 2;

/// One worker's place in the tree: indices into the worker list given to [`tree`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// `None`: the master.
    pub parent: Option<usize>,
    pub children: Vec<usize>,
}

/// The tree over `workers` receivers with `degree` children each, in breadth-first order:
/// the master feeds workers `0..degree`, worker `i` feeds `degree*(i+1)..degree*(i+2)`.
pub fn tree(workers: usize, degree: usize) -> Vec<Place> {
    let degree = degree.max(1);
    (0..workers)
        .map(|i| Place {
            // slot i+1 in a heap where the master is slot 0
            parent: match i / degree {
                0 => None,
                p => Some(p - 1),
            },
            children: (degree * (i + 1)..degree * (i + 2))
                .filter(|&c| c < workers)
                .collect(),
        })
        .collect()
}

/// The master's own children: the workers it serves directly.
pub fn master_children(workers: usize, degree: usize) -> Vec<usize> {
    (0..workers.min(degree.max(1))).collect()
}

/// Levels below the master.
pub fn depth(workers: usize, degree: usize) -> usize {
    let degree = degree.max(1);
    let (mut levels, mut covered, mut width) = (0, 0usize, 1usize);
    while covered < workers {
        width = width.saturating_mul(degree);
        covered = covered.saturating_add(width);
        levels += 1;
    }
    levels
}

/// Estimated seconds to get `bytes` to `workers` nodes when one hop carries `hop_rate` bytes
/// per second, for the star the tool used before (the master's card shared by every worker)
/// and for the pipelined tree (each card shared by `degree` children; `chunk_delay` per level).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    pub star_secs: f64,
    pub tree_secs: f64,
    pub depth: usize,
}

pub fn estimate(
    workers: usize,
    bytes: u64,
    hop_rate: f64,
    degree: usize,
    chunk_delay: f64,
) -> Estimate {
    let one = bytes as f64 / hop_rate.max(1.0);
    let depth = depth(workers, degree);
    Estimate {
        star_secs: one * workers as f64,
        tree_secs: if workers == 0 {
            0.0
        } else {
            one * (degree.max(1).min(workers)) as f64 + chunk_delay * depth as f64
        },
        depth,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_worker_has_one_parent_and_the_tree_covers_all() {
        for workers in 0..40 {
            for degree in 1..4 {
                let t = tree(workers, degree);
                assert_eq!(t.len(), workers);
                // every worker is fed exactly once: by the master or by one parent
                let mut fed = vec![0; workers];
                for c in master_children(workers, degree) {
                    fed[c] += 1;
                }
                for (i, place) in t.iter().enumerate() {
                    assert!(place.children.len() <= degree);
                    for &c in &place.children {
                        assert!(c > i, "a child comes after its parent");
                        assert_eq!(t[c].parent, Some(i));
                        fed[c] += 1;
                    }
                    if place.parent.is_none() {
                        assert!(master_children(workers, degree).contains(&i));
                    }
                }
                assert!(fed.iter().all(|&n| n == 1), "{workers}/{degree}: {fed:?}");
            }
        }
    }

    #[test]
    fn the_tree_is_log_deep() {
        assert_eq!(depth(0, 2), 0);
        assert_eq!(depth(1, 2), 1);
        assert_eq!(depth(2, 2), 1);
        assert_eq!(depth(3, 2), 2);
        assert_eq!(depth(6, 2), 2);
        assert_eq!(depth(7, 2), 3);
        assert_eq!(depth(64, 2), 6);
        assert_eq!(depth(5, 1), 5);
        let t = tree(7, 2);
        assert_eq!(t[0].children, vec![2, 3]);
        assert_eq!(t[1].children, vec![4, 5]);
        assert_eq!(t[2].children, vec![6]);
        assert_eq!(t[6].parent, Some(2));
    }

    #[test]
    fn the_estimate_grows_with_depth_not_with_workers() {
        // 500 MB, 100 MB/s per hop, 0.1 s per level
        let e = estimate(64, 500_000_000, 100e6, 2, 0.1);
        assert_eq!(e.depth, 6);
        assert!((e.star_secs - 320.0).abs() < 1e-6);
        assert!((e.tree_secs - 10.6).abs() < 1e-6);
        let one = estimate(1, 500_000_000, 100e6, 2, 0.1);
        assert!((one.tree_secs - 5.1).abs() < 1e-6);
        assert_eq!(estimate(0, 1, 1.0, 2, 0.1).tree_secs, 0.0);
    }
}
