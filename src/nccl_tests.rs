//! Reading the output of NVIDIA's `nccl-tests` (`all_reduce_perf`,
//! `all_gather_perf`, `reduce_scatter_perf`, `alltoall_perf`,
//! `sendrecv_perf`): the stdout table and the JSON that `-J FILE` writes
//! (nccl-tests ≥ 2.17, `src/util.cu`).
//!
//! # What a run gives
//! - the collective: the line `# Collective test starting: all_reduce_perf`
//!   (nccl-tests ≥ 2.17), the JSON's `args[0]`, or else the file name;
//! - the ranks and their hosts: one `#  Rank  3 Group  0 Pid … on HOST
//!   device …` line per rank (JSON: `devices[].hostname`);
//! - per message size: the out-of-place time (µs), algorithm and bus
//!   bandwidth (GB/s) and `#wrong`.
//!
//! # Sizes and bus bandwidth (nccl-tests `doc/PERFORMANCE.md`)
//! `size` is bytes: the buffer each rank reduces for all-reduce, the whole
//! gathered (or scattered) array of `n` shards for all-gather and
//! reduce-scatter, the bytes each rank holds for all-to-all, the bytes sent
//! for send/receive — the same `S` that [`crate::cost::comm`] takes. Bus
//! bandwidth is `algbw · f` with `f = 2(n−1)/n` for all-reduce, `(n−1)/n`
//! for all-gather, reduce-scatter and all-to-all, 1 for send/receive.
//!
//! A run with any `#wrong` ≠ 0 (or an "Out of bounds values" count ≠ 0)
//! measured a broken collective and is refused, naming the line.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::InputError;

/// A collective that nccl-tests measures and the cost model prices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Collective {
    /// `all_reduce_perf`.
    AllReduce,
    /// `all_gather_perf`.
    AllGather,
    /// `reduce_scatter_perf`.
    ReduceScatter,
    /// `alltoall_perf`.
    AllToAll,
    /// `sendrecv_perf`.
    SendRecv,
}

impl Collective {
    /// The nccl-tests binaries, by the collective they measure.
    const PROGRAMS: [(&'static str, Collective); 5] = [
        ("all_reduce_perf", Collective::AllReduce),
        ("all_gather_perf", Collective::AllGather),
        ("reduce_scatter_perf", Collective::ReduceScatter),
        ("alltoall_perf", Collective::AllToAll),
        ("sendrecv_perf", Collective::SendRecv),
    ];

    /// The collective a program name (or a path or file name holding one)
    /// stands for.
    pub fn of_program(name: &str) -> Option<Collective> {
        Self::PROGRAMS
            .iter()
            .find(|(p, _)| name.contains(p) || name.contains(&p[..p.len() - "_perf".len()]))
            .map(|&(_, c)| c)
    }

    /// nccl-tests' bus-bandwidth factor for `n` ranks
    /// (`doc/PERFORMANCE.md`, "Summary").
    pub fn bus_factor(self, n: u32) -> f64 {
        let n = n.max(1) as f64;
        match self {
            Collective::AllReduce => 2.0 * (n - 1.0) / n,
            Collective::AllGather | Collective::ReduceScatter | Collective::AllToAll => {
                (n - 1.0) / n
            }
            Collective::SendRecv => 1.0,
        }
    }

    /// The program's name, e.g. `all_reduce_perf`.
    pub fn program(self) -> &'static str {
        Self::PROGRAMS
            .iter()
            .find(|(_, c)| *c == self)
            .map(|(p, _)| *p)
            .unwrap_or("?")
    }
}

/// One message size of a run (the out-of-place columns).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Sample {
    /// `size`, bytes.
    pub bytes: f64,
    /// `time`, seconds (the table prints µs).
    pub time_s: f64,
    /// `busbw`, bytes/s (the table prints GB/s).
    pub busbw: f64,
}

/// One nccl-tests run.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Run {
    /// The file it was read from.
    pub file: std::path::PathBuf,
    /// What it measured.
    pub collective: Collective,
    /// Ranks (GPUs) taking part.
    pub ranks: u32,
    /// Distinct hosts among them.
    pub hosts: u32,
    /// The samples, in file order.
    pub samples: Vec<Sample>,
}

impl Run {
    /// Ranks on each host (every host must hold the same number).
    pub fn ranks_per_host(&self) -> u32 {
        self.ranks / self.hosts.max(1)
    }
}

/// Reads `text` (a stdout table, or JSON when it starts with `{`).
///
/// # Errors
/// [`InputError::Field`] naming the file, the line (or JSON field) and the
/// problem: no size column, a `#wrong` ≠ 0, a collective that cannot be
/// told, no rank lines, hosts with unequal rank counts, no samples.
pub fn parse(text: &str, file: &Path) -> Result<Run, InputError> {
    if text.trim_start().starts_with('{') {
        parse_json(text, file)
    } else {
        parse_table(text, file)
    }
}

/// Column positions of the table header (`# size count type redop root
/// time algbw busbw #wrong time …`), first (out-of-place) occurrences.
struct Columns {
    size: usize,
    time: usize,
    busbw: usize,
    /// Every `#wrong` column (out-of-place and in-place).
    wrong: Vec<usize>,
}

impl Columns {
    fn of(header: &[&str], file: &Path, line: usize) -> Result<Columns, InputError> {
        let find = |names: &[&str]| header.iter().position(|h| names.contains(h));
        let missing = |what: &str| {
            InputError::field(
                file,
                &format!("line {line}"),
                format!(
                    "the table header has no `{what}` column: {}",
                    header.join(" ")
                ),
            )
        };
        Ok(Columns {
            size: find(&["size"]).ok_or_else(|| missing("size"))?,
            time: find(&["time", "cputime"]).ok_or_else(|| missing("time"))?,
            busbw: find(&["busbw"]).ok_or_else(|| missing("busbw"))?,
            wrong: {
                let w: Vec<usize> = (0..header.len())
                    .filter(|&i| header[i] == "#wrong")
                    .collect();
                if w.is_empty() {
                    return Err(missing("#wrong"));
                }
                w
            },
        })
    }
}

fn parse_table(text: &str, file: &Path) -> Result<Run, InputError> {
    let mut collective = None;
    let mut hosts: BTreeMap<String, u32> = BTreeMap::new();
    let mut columns: Option<Columns> = None;
    let mut samples = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let at = |problem: String| InputError::field(file, &format!("line {line}"), problem);
        let t = raw.trim();
        if let Some(rest) = t.strip_prefix('#') {
            let rest = rest.trim();
            if let Some(p) = rest.strip_prefix("Collective test starting:") {
                collective = Some(Collective::of_program(p.trim()).ok_or_else(|| {
                    at(format!(
                        "`{}` is not a collective the cost model prices (all_reduce_perf, all_gather_perf, reduce_scatter_perf, alltoall_perf, sendrecv_perf)",
                        p.trim()
                    ))
                })?);
            } else if rest.starts_with("Rank ") {
                let words: Vec<&str> = rest.split_whitespace().collect();
                let host = words
                    .iter()
                    .position(|w| *w == "on")
                    .and_then(|k| words.get(k + 1))
                    .ok_or_else(|| at(format!("a rank line without `on HOST`: {rest}")))?;
                *hosts.entry(host.to_string()).or_default() += 1;
            } else if rest.split_whitespace().any(|w| w == "size" || w == "busbw") {
                let header: Vec<&str> = rest.split_whitespace().collect();
                columns = Some(Columns::of(&header, file, line)?);
            } else if let Some(v) = rest.strip_prefix("Out of bounds values") {
                let n = v.trim_start_matches([' ', ':']).split_whitespace().next();
                if n.is_some_and(|n| n != "0") {
                    return Err(at(format!(
                        "nccl-tests counted wrong values ({}): the run measured a broken collective",
                        v.trim_start_matches([' ', ':'])
                    )));
                }
            }
            continue;
        }
        let words: Vec<&str> = t.split_whitespace().collect();
        // Data rows start with the size; anything else (NCCL INFO lines,
        // launcher chatter) is not nccl-tests' table.
        if words
            .first()
            .is_none_or(|w| w.is_empty() || !w.bytes().all(|b| b.is_ascii_digit()))
        {
            continue;
        }
        let c = columns.as_ref().ok_or_else(|| {
            at("a result row before the table header (`# size count type …`): the size column is missing".into())
        })?;
        let get = |k: usize, name: &str| {
            words
                .get(k)
                .copied()
                .ok_or_else(|| at(format!("the row has no `{name}` value: {t}")))
        };
        let number = |k: usize, name: &str| -> Result<f64, InputError> {
            let w = get(k, name)?;
            match w.parse::<f64>() {
                Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
                Ok(_) => Err(at(format!("`{name}` = `{w}` must be a finite number ≥ 0"))),
                Err(_) => Err(at(format!("`{name}` = `{w}` is not a number"))),
            }
        };
        for (i, &k) in c.wrong.iter().enumerate() {
            // The out-of-place `#wrong` must be there; the in-place one is
            // checked where the row has it.
            let wrong = match words.get(k) {
                Some(w) => *w,
                None if i > 0 => continue,
                None => get(k, "#wrong")?,
            };
            if wrong != "N/A" && !wrong.parse::<f64>().is_ok_and(|x| x == 0.0) {
                return Err(at(format!(
                    "#wrong = {wrong}: the collective returned wrong values, so its times mean nothing"
                )));
            }
        }
        let sample = Sample {
            bytes: number(c.size, "size")?,
            time_s: number(c.time, "time")? * 1e-6,
            busbw: number(c.busbw, "busbw")? * 1e9,
        };
        if sample.time_s <= 0.0 {
            return Err(at(format!("time = 0 µs for {} bytes", sample.bytes)));
        }
        check_size(&samples, sample.bytes, || at(String::new()))?;
        samples.push(sample);
    }
    let collective = match collective {
        Some(c) => c,
        None => collective_from_name(file)?,
    };
    finish(
        file,
        collective,
        hosts,
        samples,
        "the `#  Rank … on HOST` lines",
    )
}

/// Largest message size read, bytes (2⁴⁸ = 256 TiB; nccl-tests sweeps
/// stop at the GPU's memory).
const MAX_BYTES: f64 = 281_474_976_710_656.0;

/// A sample's size must be 1 … [`MAX_BYTES`] and new to its run; `at`
/// names where (its message is replaced).
fn check_size(seen: &[Sample], bytes: f64, at: impl Fn() -> InputError) -> Result<(), InputError> {
    let with = |problem: String| match at() {
        InputError::Field { file, field, .. } => InputError::Field {
            file,
            field,
            problem,
        },
        e => e,
    };
    if !(1.0..=MAX_BYTES).contains(&bytes) {
        return Err(with(format!(
            "size {bytes} bytes is outside 1 … 2^48 bytes"
        )));
    }
    if seen.iter().any(|s| s.bytes == bytes) {
        return Err(with(format!(
            "size {bytes} bytes appears twice: one run per file (concatenated runs are not read)"
        )));
    }
    Ok(())
}

fn collective_from_name(file: &Path) -> Result<Collective, InputError> {
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    Collective::of_program(&name).ok_or_else(|| {
        InputError::field(
            file,
            "collective",
            "the output does not say which test ran (nccl-tests before 2.17 print no `# Collective test starting:` line); name the file after the program, e.g. `all_reduce_perf-2nodes.txt`",
        )
    })
}

fn finish(
    file: &Path,
    collective: Collective,
    hosts: BTreeMap<String, u32>,
    samples: Vec<Sample>,
    rank_source: &str,
) -> Result<Run, InputError> {
    let ranks: u32 = hosts.values().sum();
    if ranks == 0 {
        return Err(InputError::field(
            file,
            "devices",
            format!("no ranks listed ({rank_source}); the run's group cannot be placed"),
        ));
    }
    let per = *hosts.values().next().unwrap_or(&0);
    if let Some((h, n)) = hosts.iter().find(|(_, n)| **n != per) {
        return Err(InputError::field(
            file,
            "devices",
            format!(
                "host {h} runs {n} ranks but {} runs {per}; meshplan prices groups with the same ranks on every host",
                hosts.keys().next().map(String::as_str).unwrap_or("?")
            ),
        ));
    }
    if samples.is_empty() {
        return Err(InputError::field(
            file,
            "results",
            "no result rows (sizes with times) in the output",
        ));
    }
    Ok(Run {
        file: file.to_path_buf(),
        collective,
        ranks,
        hosts: hosts.len() as u32,
        samples,
    })
}

/// The elements of the array `v[key]`, numbered; none when it is absent
/// or not an array.
fn entries<'a>(
    v: &'a serde_json::Value,
    key: &str,
) -> impl Iterator<Item = (usize, &'a serde_json::Value)> {
    v.get(key)
        .and_then(|a| a.as_array())
        .into_iter()
        .flatten()
        .enumerate()
}

fn parse_json(text: &str, file: &Path) -> Result<Run, InputError> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| InputError::Syntax {
        file: file.to_path_buf(),
        detail: format!("not nccl-tests JSON: {e}"),
    })?;
    let bad = |field: &str, problem: String| InputError::field(file, field, problem);
    let collective = match v
        .pointer("/args/0")
        .and_then(|a| a.as_str())
        .and_then(Collective::of_program)
    {
        Some(c) => c,
        None => collective_from_name(file)?,
    };
    let mut hosts: BTreeMap<String, u32> = BTreeMap::new();
    for (i, d) in entries(&v, "devices") {
        let h = d
            .get("hostname")
            .and_then(|h| h.as_str())
            .ok_or_else(|| bad(&format!("devices[{i}].hostname"), "missing".into()))?;
        *hosts.entry(h.to_string()).or_default() += 1;
    }
    if let Some(n) = v.pointer("/out_of_bounds/count").and_then(|c| c.as_f64())
        && n != 0.0
    {
        return Err(bad(
            "out_of_bounds.count",
            format!("{n} wrong values: the run measured a broken collective"),
        ));
    }
    let mut samples = Vec::new();
    for (i, r) in entries(&v, "results") {
        let field = |name: &str| format!("results[{i}].{name}");
        let bytes = r
            .get("size")
            .and_then(|s| s.as_f64())
            .ok_or_else(|| bad(&field("size"), "missing: the size column is needed".into()))?;
        check_size(&samples, bytes, || bad(&field("size"), String::new()))?;
        let Some(o) = r.get("out_of_place").filter(|o| !o.is_null()) else {
            continue;
        };
        let num = |name: &str| {
            let f = field(&format!("out_of_place.{name}"));
            match o.get(name) {
                None => Err(bad(&f, "missing".into())),
                Some(x) => x
                    .as_f64()
                    .filter(|x| x.is_finite() && *x >= 0.0)
                    .ok_or_else(|| bad(&f, format!("{x} is not a finite number ≥ 0"))),
            }
        };
        for place in ["out_of_place", "in_place"] {
            if let Some(w) = r
                .pointer(&format!("/{place}/nwrong"))
                .and_then(|w| w.as_f64())
                && w != 0.0
            {
                return Err(bad(
                    &field(&format!("{place}.nwrong")),
                    format!("{w}: the collective returned wrong values, so its times mean nothing"),
                ));
            }
        }
        let time_key = if o.get("cpu_time").is_some() {
            "cpu_time"
        } else {
            "time"
        };
        let time_s = num(time_key)? * 1e-6;
        if time_s <= 0.0 {
            return Err(bad(&field("out_of_place.time"), "0 µs".into()));
        }
        samples.push(Sample {
            bytes,
            time_s,
            busbw: num("bus_bw")? * 1e9,
        });
    }
    finish(file, collective, hosts, samples, "`devices` in the JSON")
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "# nccl-tests version 2.19.6 nccl-headers=22703 nccl-library=22703
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 1 minBytes 8 maxBytes 1048576 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0
#
# Using devices
#  Rank  0 Group  0 Pid  11 on     node-a device  0 [0000:18:00] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  12 on     node-a device  1 [0000:2a:00] NVIDIA H100 80GB HBM3
#  Rank  2 Group  0 Pid  13 on     node-b device  0 [0000:18:00] NVIDIA H100 80GB HBM3
#  Rank  3 Group  0 Pid  14 on     node-b device  1 [0000:2a:00] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
";

    /// One out-of-place result of 8 bytes in 20 µs, no wrong values.
    const SMALL_ROW: &str =
        "           8             2     float     sum      -1    20.00    0.00    0.00      0\n";

    /// The message of the error `parse` gives for `text` read as `x.txt`.
    fn error_of(text: &str) -> String {
        parse(text, Path::new("x.txt")).unwrap_err().to_string()
    }

    #[test]
    fn reads_a_table() {
        let text = format!(
            "{HEAD}           8             2     float     sum      -1    20.00    0.00    0.00      0    19.00    0.00    0.00      0
     1048576        262144     float     sum      -1    50.00   20.97   31.46      0    49.00   21.40   32.10      0
# Out of bounds values : 0 OK
"
        );
        let run = parse(&text, Path::new("x.txt")).unwrap();
        assert_eq!(run.collective, Collective::AllReduce);
        assert_eq!((run.ranks, run.hosts, run.ranks_per_host()), (4, 2, 2));
        assert_eq!(run.samples.len(), 2);
        // 1 MiB in 50 µs: algbw 20.97 GB/s, busbw ·2·3/4 = 31.46 GB/s.
        let s = run.samples[1];
        assert_eq!(s.bytes, 1048576.0);
        assert!((s.time_s - 50e-6).abs() < 1e-15);
        assert!(
            (s.bytes / s.time_s * Collective::AllReduce.bus_factor(4) - s.busbw).abs() < 0.01e9
        );
    }

    #[test]
    fn refuses_wrong_values() {
        let text = format!(
            "{HEAD}           8             2     float     sum      -1    20.00    0.00    0.00      3    19.00    0.00    0.00      0\n"
        );
        assert_eq!(
            error_of(&text),
            "x.txt: field `line 14`: #wrong = 3: the collective returned wrong values, so its times mean nothing"
        );
    }

    #[test]
    fn refuses_a_missing_size_column_unequal_hosts_and_unknown_tests() {
        // (text of the header, replaced by, what the error says)
        for (from, to, says) in [
            (
                "#       size ",
                "#       bytes",
                "x.txt: field `line 12`: the table header has no `size` column",
            ),
            (
                "node-b device  1",
                "node-a device  2",
                "host node-b runs 1 ranks but node-a runs 3",
            ),
            (
                "all_reduce_perf",
                "broadcast_perf",
                "`broadcast_perf` is not a collective the cost model prices",
            ),
        ] {
            let e = error_of(&format!("{}{SMALL_ROW}", HEAD.replace(from, to)));
            assert!(e.contains(says), "{e}");
        }
    }

    #[test]
    fn bus_factors_of_the_nccl_tests_summary() {
        assert_eq!(Collective::AllReduce.bus_factor(8), 1.75);
        assert_eq!(Collective::AllGather.bus_factor(8), 0.875);
        assert_eq!(Collective::SendRecv.bus_factor(2), 1.0);
    }
}
