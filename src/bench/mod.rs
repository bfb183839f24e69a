//! `bench`, the pure parts: the arguments by their own grammars ([`Settings`]), the framework
//! from what the image carries, which hosts run how many ranks at each slot count ([`plan`]),
//! keeping a job's output as it streams ([`output`]), reading it and working out speed-up and
//! efficiency ([`report`]), and the chart ([`svg`]). No I/O: the command itself (SSH,
//! horovodrun, Ctrl-C, the chart's file) is `cmd/bench.rs`.

pub mod output;
pub mod plan;
pub mod report;
pub mod svg;

use std::fmt;

use crate::input::shown;

/// The benchmark jobs each rank runs, shipped into the binary and written to every node.
pub const TENSORFLOW_JOB: &str = include_str!("../../templates/bench/bench_tensorflow.py");
pub const PYTORCH_JOB: &str = include_str!("../../templates/bench/bench_pytorch.py");

/// Side of the square synthetic images (3 channels), in both jobs.
pub const IMAGE_SIZE: u32 = 32;
/// Allreduce message sizes timed after training, MiB.
pub const ALLREDUCE_SIZES_MIB: [u32; 2] = [1, 16];

/// A bad `bench` argument: shown with the value shortened and escaped (exit 2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadArgument(pub String);

fn bad(option: &str, value: &str, why: impl fmt::Display) -> BadArgument {
    BadArgument(format!("{option} `{}`: {why}", shown(value)))
}

/// The framework a job trains with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Framework {
    Tensorflow,
    Pytorch,
}

impl Framework {
    pub const ALL: [Framework; 2] = [Framework::Tensorflow, Framework::Pytorch];

    pub fn as_str(self) -> &'static str {
        match self {
            Framework::Tensorflow => "tensorflow",
            Framework::Pytorch => "pytorch",
        }
    }

    /// The Horovod module a rank imports (and the probe tries).
    pub fn module(self) -> &'static str {
        match self {
            Framework::Tensorflow => "horovod.tensorflow",
            Framework::Pytorch => "horovod.torch",
        }
    }

    /// What the probe checks: the framework's own module, and Horovod's compiled extension
    /// for it (`import horovod.torch` succeeds with a warning when it was built without).
    pub fn needs(self) -> (&'static str, &'static str) {
        match self {
            Framework::Tensorflow => ("tensorflow", "horovod.tensorflow.mpi_lib"),
            Framework::Pytorch => ("torch", "horovod.torch.mpi_lib_v2"),
        }
    }

    /// The job's text and its file name on the nodes.
    pub fn job(self) -> (&'static str, &'static str) {
        match self {
            Framework::Tensorflow => ("bench_tensorflow.py", TENSORFLOW_JOB),
            Framework::Pytorch => ("bench_pytorch.py", PYTORCH_JOB),
        }
    }
}

impl fmt::Display for Framework {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `--framework`: one, or whichever the image carries (TensorFlow first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameworkChoice {
    Auto,
    Only(Framework),
}

/// The models `--model` picks from: CIFAR-style ResNets (3 stages of basic blocks, 16, 32
/// and 64 channels) on 32x32 images, named by their depth: (name, blocks per stage).
pub const MODELS: [(&str, u32); 3] = [("resnet8", 1), ("resnet14", 2), ("resnet20", 3)];
pub const DEFAULT_MODEL: &str = "resnet8";

/// Everything `bench` was asked for, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The slot counts asked for, ascending; `None`: 1, 2, 4, ... and every slot.
    pub slots: Option<Vec<u32>>,
    pub model: &'static str,
    pub batch_size: u32,
    pub framework: FrameworkChoice,
    /// Measured steps, after `warmup` steps that are not timed.
    pub steps: u32,
    pub warmup: u32,
}

pub const MAX_BATCH: u32 = 1024;
pub const MAX_STEPS: u32 = 10_000;
pub const MAX_WARMUP: u32 = 1_000;
/// Most entries in `--slots`.
pub const MAX_SLOT_COUNTS: usize = 64;

/// The raw arguments, as typed.
#[derive(Debug, Default, Clone)]
pub struct Raw<'a> {
    pub slots: Option<&'a str>,
    pub model: Option<&'a str>,
    pub batch_size: Option<&'a str>,
    pub framework: Option<&'a str>,
    pub steps: Option<&'a str>,
    pub warmup: Option<&'a str>,
}

impl Settings {
    /// Checks every argument by its own grammar; nothing here knows the cluster yet.
    pub fn parse(raw: &Raw<'_>) -> Result<Settings, BadArgument> {
        let slots = raw.slots.map(parse_slots).transpose()?;
        let model = match raw.model {
            None => DEFAULT_MODEL,
            Some(m) => MODELS
                .iter()
                .map(|(name, _)| *name)
                .find(|name| *name == m)
                .ok_or_else(|| {
                    let names: Vec<&str> = MODELS.iter().map(|(n, _)| *n).collect();
                    bad("--model", m, format!("not one of {}", names.join(", ")))
                })?,
        };
        let framework = match raw.framework {
            None | Some("auto") => FrameworkChoice::Auto,
            Some("tensorflow") => FrameworkChoice::Only(Framework::Tensorflow),
            Some("pytorch") => FrameworkChoice::Only(Framework::Pytorch),
            Some(other) => {
                return Err(bad(
                    "--framework",
                    other,
                    "not one of auto, tensorflow, pytorch",
                ))
            }
        };
        Ok(Settings {
            slots,
            model,
            batch_size: number("--batch-size", raw.batch_size, 32, 1, MAX_BATCH)?,
            framework,
            steps: number("--steps", raw.steps, 20, 1, MAX_STEPS)?,
            warmup: number("--warmup", raw.warmup, 2, 0, MAX_WARMUP)?,
        })
    }

    /// Basic blocks per stage of the chosen model.
    pub fn blocks(&self) -> u32 {
        MODELS
            .iter()
            .find(|(n, _)| *n == self.model)
            .map_or(1, |(_, b)| *b)
    }
}

/// A whole number by the plain grammar `[0-9]{1,6}` (no sign, no spaces, no `0x`), in
/// `min..=max`.
fn number(
    option: &str,
    value: Option<&str>,
    default: u32,
    min: u32,
    max: u32,
) -> Result<u32, BadArgument> {
    let Some(v) = value else { return Ok(default) };
    let n = plain_number(v).ok_or_else(|| bad(option, v, "not a whole number"))?;
    if n < min || n > max {
        return Err(bad(option, v, format!("must be {min} to {max}")));
    }
    Ok(n)
}

fn plain_number(v: &str) -> Option<u32> {
    if v.is_empty() || v.len() > 6 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok()
}

/// `--slots 1,2,4`: whole numbers from 1, comma-separated, none twice; returned ascending.
pub fn parse_slots(value: &str) -> Result<Vec<u32>, BadArgument> {
    let mut counts = Vec::new();
    for item in value.split(',') {
        let n = plain_number(item).ok_or_else(|| {
            if item.is_empty() {
                bad("--slots", value, "an empty entry; give counts like 1,2,4")
            } else {
                bad(
                    "--slots",
                    value,
                    format!("`{}` is not a whole number", shown(item)),
                )
            }
        })?;
        if n == 0 {
            return Err(bad("--slots", value, "a slot count is at least 1"));
        }
        if counts.contains(&n) {
            return Err(bad("--slots", value, format!("{n} is given twice")));
        }
        counts.push(n);
        if counts.len() > MAX_SLOT_COUNTS {
            return Err(bad(
                "--slots",
                value,
                format!("more than {MAX_SLOT_COUNTS} slot counts"),
            ));
        }
    }
    counts.sort_unstable();
    Ok(counts)
}

/// The Horovod modules to try in the image: the one asked for, or both.
pub fn probe_modules(choice: FrameworkChoice) -> Vec<Framework> {
    match choice {
        FrameworkChoice::Auto => Framework::ALL.to_vec(),
        FrameworkChoice::Only(f) => vec![f],
    }
}

/// A Python script that, for each framework, imports it and its Horovod module and looks for
/// Horovod's extension for it, printing `HVD_FW <horovod module> ok|missing`. Each framework
/// in a process of its own: in the CUDA image, horovod.tensorflow then horovod.torch in one
/// process aborts it (their wheels use different C++ ABIs).
pub fn probe_script(frameworks: &[Framework]) -> String {
    let checks: Vec<String> = frameworks
        .iter()
        .map(|f| {
            let (framework, extension) = f.needs();
            format!("('{framework}', '{}', '{extension}')", f.module())
        })
        .collect();
    format!(
        "import subprocess, sys\n\
         probe = ('import importlib, importlib.util, sys; importlib.import_module(sys.argv[1]); '\n\
         \x20        'importlib.import_module(sys.argv[2]); sys.exit(importlib.util.find_spec(sys.argv[3]) is None)')\n\
         for fw, mod, ext in [{}]:\n\
         \x20   ok = subprocess.run([sys.executable, '-c', probe, fw, mod, ext], stdout=subprocess.DEVNULL,\n\
         \x20                       stderr=subprocess.DEVNULL).returncode == 0\n\
         \x20   print('HVD_FW', mod, 'ok' if ok else 'missing', flush=True)\n",
        checks.join(", ")
    )
}

/// The framework to run, from what the probe printed: the one asked for if the image
/// carries it, else (auto) TensorFlow first, then PyTorch. Err: what the image lacks.
pub fn choose_framework(choice: FrameworkChoice, probe: &str) -> Result<Framework, String> {
    let carries = |f: Framework| {
        probe
            .lines()
            .any(|l| l.trim() == format!("HVD_FW {} ok", f.module()))
    };
    match choice {
        FrameworkChoice::Only(f) if carries(f) => Ok(f),
        FrameworkChoice::Only(f) => Err(format!(
            "--framework {f}: the cluster's Horovod image cannot import {}",
            f.module()
        )),
        FrameworkChoice::Auto => {
            Framework::ALL
                .into_iter()
                .find(|f| carries(*f))
                .ok_or_else(|| {
                    format!(
                        "the cluster's Horovod image can import neither {} nor {}",
                        Framework::Tensorflow.module(),
                        Framework::Pytorch.module()
                    )
                })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(raw: Raw<'_>) -> Result<Settings, BadArgument> {
        Settings::parse(&raw)
    }

    #[test]
    fn defaults_are_small() {
        let s = parse(Raw::default()).unwrap();
        assert_eq!(s.slots, None);
        assert_eq!(s.model, "resnet8");
        assert_eq!(s.blocks(), 1);
        assert_eq!((s.batch_size, s.steps, s.warmup), (32, 20, 2));
        assert_eq!(s.framework, FrameworkChoice::Auto);
    }

    #[test]
    fn slot_lists_by_their_grammar() {
        assert_eq!(parse_slots("4,1,2").unwrap(), vec![1, 2, 4]);
        assert_eq!(parse_slots("12").unwrap(), vec![12]);
        for (value, says) in [
            ("0", "at least 1"),
            ("1,0,2", "at least 1"),
            ("1,1", "1 is given twice"),
            ("2,1,2", "2 is given twice"),
            ("1,,2", "an empty entry"),
            ("", "an empty entry"),
            ("1,x", "`x` is not a whole number"),
            ("+1", "not a whole number"),
            ("-1", "not a whole number"),
            (" 1", "not a whole number"),
            ("0x10", "not a whole number"),
            ("1.5", "not a whole number"),
            ("99999999999999999999", "not a whole number"),
            ("١", "not a whole number"),
        ] {
            let e = parse_slots(value).unwrap_err().0;
            assert!(e.starts_with("--slots `"), "{value:?}: {e}");
            assert!(e.contains(says), "{value:?}: {e}");
        }
        let many = (1..=65)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",");
        assert!(parse_slots(&many).unwrap_err().0.contains("more than 64"));
    }

    #[test]
    fn hostile_values_come_back_shortened_and_escaped() {
        let long = format!("1,{}", "9".repeat(5000));
        let e = parse_slots(&long).unwrap_err().0;
        assert!(e.len() < 300, "{e}");
        assert!(e.contains("bytes)"), "{e}");
        let e = parse_slots("1,\u{1b}[31mred\n").unwrap_err().0;
        assert!(!e.contains('\u{1b}') && !e.contains('\n'), "{e}");
        assert!(e.contains("\\u{1b}") && e.contains("\\n"), "{e}");
        let e = parse(Raw {
            model: Some("resnet8; rm -rf /\n"),
            ..Raw::default()
        })
        .unwrap_err()
        .0;
        assert!(
            e.starts_with("--model `resnet8; rm -rf /\\n`: not one of resnet8, resnet14, resnet20"),
            "{e}"
        );
    }

    #[test]
    fn models_frameworks_and_numbers_by_their_grammar() {
        let s = parse(Raw {
            model: Some("resnet20"),
            batch_size: Some("64"),
            framework: Some("pytorch"),
            steps: Some("3"),
            warmup: Some("0"),
            slots: Some("2,1"),
        })
        .unwrap();
        assert_eq!(s.blocks(), 3);
        assert_eq!(s.framework, FrameworkChoice::Only(Framework::Pytorch));
        assert_eq!((s.batch_size, s.steps, s.warmup), (64, 3, 0));
        assert_eq!(s.slots, Some(vec![1, 2]));
        for raw in [
            Raw {
                model: Some("ResNet8"),
                ..Raw::default()
            },
            Raw {
                model: Some(""),
                ..Raw::default()
            },
            Raw {
                framework: Some("jax"),
                ..Raw::default()
            },
            Raw {
                batch_size: Some("0"),
                ..Raw::default()
            },
            Raw {
                batch_size: Some("1025"),
                ..Raw::default()
            },
            Raw {
                batch_size: Some("+32"),
                ..Raw::default()
            },
            Raw {
                batch_size: Some("32 "),
                ..Raw::default()
            },
            Raw {
                steps: Some("0"),
                ..Raw::default()
            },
            Raw {
                warmup: Some("1001"),
                ..Raw::default()
            },
        ] {
            assert!(parse(raw.clone()).is_err(), "{raw:?}");
        }
    }

    #[test]
    fn every_model_is_known_to_both_jobs() {
        for (name, blocks) in MODELS {
            let entry = format!("\"{name}\": {blocks}");
            assert!(TENSORFLOW_JOB.contains(&entry), "{entry}");
            assert!(PYTORCH_JOB.contains(&entry), "{entry}");
        }
        for job in [TENSORFLOW_JOB, PYTORCH_JOB] {
            for marker in ["HVD_BENCH_RANK", "HVD_BENCH_STEP", "HVD_BW", "--run-id"] {
                assert!(job.contains(marker), "{marker}");
            }
        }
    }

    #[test]
    fn the_framework_is_what_the_image_carries() {
        let both = "HVD_FW horovod.tensorflow ok\nHVD_FW horovod.torch ok\n";
        let tf_only = "HVD_FW horovod.tensorflow ok\nHVD_FW horovod.torch missing ImportError\n";
        let torch_only = "noise\nHVD_FW horovod.tensorflow missing ModuleNotFoundError\nHVD_FW horovod.torch ok\n";
        let auto = FrameworkChoice::Auto;
        let torch = FrameworkChoice::Only(Framework::Pytorch);
        assert_eq!(choose_framework(auto, both), Ok(Framework::Tensorflow));
        assert_eq!(choose_framework(auto, torch_only), Ok(Framework::Pytorch));
        assert_eq!(choose_framework(torch, both), Ok(Framework::Pytorch));
        let e = choose_framework(torch, tf_only).unwrap_err();
        assert_eq!(
            e,
            "--framework pytorch: the cluster's Horovod image cannot import horovod.torch"
        );
        assert!(choose_framework(auto, "").is_err());
        // A line that merely contains the words is not a yes.
        assert!(choose_framework(torch, "x HVD_FW horovod.torch ok x").is_err());
        assert_eq!(probe_modules(torch), vec![Framework::Pytorch]);
        let script = probe_script(&Framework::ALL);
        assert!(
            script.contains("[('tensorflow', 'horovod.tensorflow', 'horovod.tensorflow.mpi_lib'), ('torch', 'horovod.torch', 'horovod.torch.mpi_lib_v2')]"),
            "{script}"
        );
        assert!(
            script.contains("subprocess.run([sys.executable, '-c', probe, fw, mod, ext]"),
            "one process per framework: {script}"
        );
        // The script runs: with neither framework installed here, both are missing.
        let out = std::process::Command::new("python3")
            .args(["-c", &script])
            .output()
            .expect("python3");
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "HVD_FW horovod.tensorflow missing\nHVD_FW horovod.torch missing\n"
        );
    }
}
