//! The catalog of model cards, GPU and cluster profiles.
//!
//! The files shipped in `models/` and `hardware/` are compiled into the
//! binary, so `meshplan` works from any directory. A user adds or overrides
//! entries with `--models-dir` / `--hardware-dir` (same file format); a file
//! whose `name` matches a shipped entry replaces it.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use include_dir::{Dir, include_dir};

use crate::error::InputError;
use crate::spec::hardware::{Cluster, Gpu};
use crate::spec::model::Model;

static MODELS: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/models");
static GPUS: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/hardware/gpus");
static CLUSTERS: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/hardware/clusters");

/// Every known model, GPU and cluster.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    /// Model cards, in name order.
    pub models: Vec<Model>,
    /// GPU profiles, in name order.
    pub gpus: Vec<Gpu>,
    /// Cluster profiles, in name order.
    pub clusters: Vec<Cluster>,
}

fn embedded(dir: &Dir<'_>, prefix: &str) -> Vec<(PathBuf, String)> {
    let mut out: Vec<(PathBuf, String)> = dir
        .files()
        .filter(|f| f.path().extension().is_some_and(|e| e == "toml"))
        .filter_map(|f| {
            f.contents_utf8()
                .map(|t| (Path::new(prefix).join(f.path()), t.to_string()))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn read_dir_toml(dir: &Path) -> Result<Vec<(PathBuf, String)>, InputError> {
    let entries = std::fs::read_dir(dir).map_err(|source| InputError::Io {
        file: dir.to_path_buf(),
        source,
    })?;
    let mut out = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|source| InputError::Io {
                file: dir.to_path_buf(),
                source,
            })?
            .path();
        if path.extension().is_some_and(|e| e == "toml") {
            let text = std::fs::read_to_string(&path).map_err(|source| InputError::Io {
                file: path.clone(),
                source,
            })?;
            out.push((path, text));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

fn upsert<T>(list: &mut Vec<T>, item: T, name: impl Fn(&T) -> &str) {
    if let Some(slot) = list.iter_mut().find(|x| name(x) == name(&item)) {
        *slot = item;
    } else {
        list.push(item);
    }
}

impl Catalog {
    /// The shipped catalog (compiled into the binary).
    ///
    /// Parsed once per process (a search asks for it twice: the command
    /// and the trust record of the validation table, 0.8 ms each) and
    /// cloned after.
    ///
    /// # Errors
    /// Only if a shipped file is broken, which the test suite rules out.
    pub fn shipped() -> Result<Catalog, InputError> {
        static SHIPPED: OnceLock<Catalog> = OnceLock::new();
        if let Some(c) = SHIPPED.get() {
            return Ok(c.clone());
        }
        // A broken file is parsed again on each call, for its error.
        let c = Self::parse_shipped()?;
        Ok(SHIPPED.get_or_init(|| c).clone())
    }

    /// The shipped model card `name` (for tests: panics when there is none).
    #[cfg(test)]
    pub(crate) fn shipped_model(name: &str) -> Model {
        Catalog::shipped().unwrap().model(name).unwrap().clone()
    }

    /// Parse the files compiled into the binary.
    fn parse_shipped() -> Result<Catalog, InputError> {
        let mut c = Catalog::default();
        for (path, text) in embedded(&MODELS, "models") {
            c.models.push(Model::from_toml(&text, &path)?);
        }
        for (path, text) in embedded(&GPUS, "hardware/gpus") {
            c.gpus.push(Gpu::from_toml(&text, &path)?);
        }
        for (path, text) in embedded(&CLUSTERS, "hardware/clusters") {
            c.clusters.push(Cluster::from_toml(&text, &path)?);
        }
        c.check_links()?;
        Ok(c)
    }

    /// Add the model cards of a directory (`*.toml`), replacing same-named
    /// ones, and return the notes to print (on stderr).
    ///
    /// A user card's alias that a shipped card also has moves to the user's
    /// card (the shipped card keeps its name and other aliases), with a
    /// note: the user asked for their card by that word.
    ///
    /// # Errors
    /// [`InputError::Io`] if the directory or a file cannot be read; the
    /// parse errors of [`Model::from_toml`]; [`InputError::Field`] for two
    /// cards of the directory with the same name or alias (naming both
    /// files), or an alias that is another card's name (a name wins over
    /// an alias, so the alias would never reach the user's card).
    pub fn add_models_dir(&mut self, dir: &Path) -> Result<Vec<String>, InputError> {
        let mut notes = Vec::new();
        // Name or alias (lower case) → the directory's file that claims it.
        let mut claimed: Vec<(String, PathBuf)> = Vec::new();
        let mut cards = Vec::new();
        for (path, text) in read_dir_toml(dir)? {
            let m = Model::from_toml(&text, &path)?;
            let words =
                std::iter::once(("name", &m.name)).chain(m.aliases.iter().map(|a| ("aliases", a)));
            for (field, w) in words {
                let key = w.to_ascii_lowercase();
                if let Some((_, other)) = claimed.iter().find(|(k, _)| *k == key) {
                    return Err(InputError::field(
                        &path,
                        field,
                        format!(
                            "`{}` is also a name or alias of {}; each card of a models directory needs its own name and aliases",
                            crate::limits::echo(w),
                            other.display()
                        ),
                    ));
                }
                claimed.push((key, path.clone()));
            }
            cards.push((path, m));
        }
        for (path, m) in cards {
            for a in &m.aliases {
                let clash = self
                    .models
                    .iter_mut()
                    .filter(|s| s.name != m.name)
                    .find(|s| {
                        s.name.eq_ignore_ascii_case(a)
                            || s.aliases.iter().any(|x| x.eq_ignore_ascii_case(a))
                    });
                let Some(shipped) = clash else { continue };
                if shipped.name.eq_ignore_ascii_case(a) {
                    return Err(InputError::field(
                        &path,
                        "aliases",
                        format!(
                            "`{}` is the name of the card {}; a name wins over an alias, so this alias would never select this card (rename the alias, or name this card `{}` to replace that one)",
                            crate::limits::echo(a),
                            shipped.name,
                            shipped.name
                        ),
                    ));
                }
                shipped.aliases.retain(|x| !x.eq_ignore_ascii_case(a));
                notes.push(format!(
                    "note: {}: alias `{}` now selects this card `{}`, not {}",
                    path.display(),
                    crate::limits::echo(a),
                    m.name,
                    shipped.name
                ));
            }
            let mut m = m;
            // A name that is another card's alias takes the word over (a
            // name wins over an alias): drop the alias there, and say so.
            for other in self.models.iter_mut().filter(|s| s.name != m.name) {
                let before = other.aliases.len();
                other.aliases.retain(|x| !x.eq_ignore_ascii_case(&m.name));
                if other.aliases.len() < before {
                    notes.push(format!(
                        "note: {}: its name `{}` was an alias of {}; it now selects this card",
                        path.display(),
                        crate::limits::echo(&m.name),
                        other.name
                    ));
                }
            }
            // A card that replaces a shipped one by name keeps the shipped
            // card's aliases (scripts that say `--model 8b` go on working,
            // now with the user's card), and says so.
            if let Some(shipped) = self.models.iter().find(|s| s.name == m.name) {
                let kept: Vec<String> = shipped
                    .aliases
                    .iter()
                    .filter(|a| !m.aliases.iter().any(|x| x.eq_ignore_ascii_case(a)))
                    .cloned()
                    .collect();
                let also = if kept.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; its aliases {} select this card too",
                        kept.iter()
                            .map(|a| format!("`{a}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                };
                notes.push(format!(
                    "note: {}: replaces the shipped model card `{}` (its `name` field){also}",
                    path.display(),
                    crate::limits::echo(&m.name)
                ));
                m.aliases.extend(kept);
            }
            let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
            if stem != m.name {
                notes.push(format!(
                    "note: {}: selected as `{}`, its `name` field, not by the file name `{}`",
                    path.display(),
                    crate::limits::echo(&m.name),
                    crate::limits::echo(stem)
                ));
            }
            upsert(&mut self.models, m, |m| &m.name);
        }
        Ok(notes)
    }

    /// Add the profiles of a hardware directory (`gpus/*.toml`,
    /// `clusters/*.toml`), replacing those with the same `name` field, and
    /// return the notes to print (on stderr): which shipped profile a file
    /// replaces, and a file whose `name` is not its file name (the `name`
    /// selects it, a copied file keeps the original's).
    ///
    /// # Errors
    /// As [`Catalog::add_models_dir`]; also a cluster naming an unknown GPU.
    pub fn add_hardware_dir(&mut self, dir: &Path) -> Result<Vec<String>, InputError> {
        let mut notes = Vec::new();
        let note = |notes: &mut Vec<String>, path: &Path, kind: &str, name: &str, shipped: bool| {
            let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
            let named = crate::limits::echo(name);
            if shipped {
                notes.push(format!(
                    "note: {}: replaces the shipped {kind} `{named}` (its `name` field)",
                    path.display()
                ));
            }
            if stem != name {
                notes.push(format!(
                    "note: {}: selected as `{named}`, its `name` field, not by the file name `{}`",
                    path.display(),
                    crate::limits::echo(stem)
                ));
            }
        };
        let shipped_gpus: Vec<String> = self.gpus.iter().map(|g| g.name.clone()).collect();
        let shipped_clusters: Vec<String> = self.clusters.iter().map(|c| c.name.clone()).collect();
        // Name → the directory's file that claims it, per kind: two files
        // of one directory with one name are an error naming both (the
        // last read would win silently), as for `--models-dir`.
        let mut claimed: Vec<(&str, String, PathBuf)> = Vec::new();
        let mut claim = |kind: &'static str, name: &str, path: &Path| -> Result<(), InputError> {
            if let Some((_, _, other)) = claimed.iter().find(|(k, n, _)| *k == kind && n == name) {
                return Err(InputError::field(
                    path,
                    "name",
                    format!(
                        "`{}` is also the name of {}; each {kind} profile of a hardware directory needs its own name",
                        crate::limits::echo(name),
                        other.display()
                    ),
                ));
            }
            claimed.push((kind, name.to_string(), path.to_path_buf()));
            Ok(())
        };
        let gpus = dir.join("gpus");
        if gpus.is_dir() {
            for (path, text) in read_dir_toml(&gpus)? {
                let g = Gpu::from_toml(&text, &path)?;
                claim("GPU", &g.name, &path)?;
                let shipped = shipped_gpus.contains(&g.name);
                note(&mut notes, &path, "GPU", &g.name, shipped);
                upsert(&mut self.gpus, g, |g| &g.name);
            }
        }
        let clusters = dir.join("clusters");
        if clusters.is_dir() {
            for (path, text) in read_dir_toml(&clusters)? {
                let c = Cluster::from_toml(&text, &path)?;
                self.check_gpu_known(&c, &path)?;
                claim("cluster", &c.name, &path)?;
                let shipped = shipped_clusters.contains(&c.name);
                note(&mut notes, &path, "cluster", &c.name, shipped);
                upsert(&mut self.clusters, c, |c| &c.name);
            }
        }
        if !gpus.is_dir() && !clusters.is_dir() {
            return Err(InputError::field(
                dir,
                "gpus/, clusters/",
                "neither subdirectory exists; a hardware directory holds gpus/*.toml and clusters/*.toml",
            ));
        }
        self.check_links()?;
        Ok(notes)
    }

    fn check_links(&self) -> Result<(), InputError> {
        for c in &self.clusters {
            self.check_gpu_known(c, Path::new(&format!("hardware/clusters/{}.toml", c.name)))?;
        }
        Ok(())
    }

    /// The field error of cluster `c` (read from `file`) when its `gpu`
    /// names no GPU profile of the catalog, with the closest name.
    fn check_gpu_known(&self, c: &Cluster, file: &Path) -> Result<(), InputError> {
        let names = || self.gpus.iter().map(|g| g.name.as_str());
        InputError::unless(names().any(|g| g == c.gpu), file, "gpu", || {
            format!(
                "unknown GPU `{}`; {}known GPUs: {}",
                crate::limits::echo(&c.gpu),
                crate::error::closest(&c.gpu, names())
                    .map(|s| format!("did you mean `{s}`? "))
                    .unwrap_or_default(),
                self.gpu_names()
            )
        })
    }

    fn gpu_names(&self) -> String {
        self.gpus
            .iter()
            .map(|g| g.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Find a model by name or alias (case-insensitive).
    ///
    /// # Errors
    /// [`InputError::Unknown`] listing the known names.
    pub fn model(&self, name: &str) -> Result<&Model, InputError> {
        let key = name.to_ascii_lowercase();
        // A card's own name wins over another card's alias (a user card
        // named `llama-3.1-405b` over the shipped llama3-405b's alias).
        self.models
            .iter()
            .find(|m| m.name.eq_ignore_ascii_case(&key))
            .or_else(|| {
                self.models
                    .iter()
                    .find(|m| m.aliases.iter().any(|a| a.eq_ignore_ascii_case(&key)))
            })
            .ok_or_else(|| InputError::Unknown {
                kind: "model",
                name: name.to_string(),
                suggestion: crate::error::closest(
                    name,
                    self.models.iter().flat_map(|m| {
                        std::iter::once(m.name.as_str()).chain(m.aliases.iter().map(String::as_str))
                    }),
                ),
                known: self
                    .models
                    .iter()
                    .map(|m| {
                        if m.aliases.is_empty() {
                            m.name.clone()
                        } else {
                            format!("{} ({})", m.name, m.aliases.join(", "))
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// Find a cluster by name (case-insensitive).
    ///
    /// # Errors
    /// [`InputError::Unknown`] listing the known names.
    pub fn cluster(&self, name: &str) -> Result<&Cluster, InputError> {
        find_by_name(&self.clusters, "cluster", name, |c| &c.name)
    }

    /// Find a GPU by name (case-insensitive).
    ///
    /// # Errors
    /// [`InputError::Unknown`] listing the known names.
    pub fn gpu(&self, name: &str) -> Result<&Gpu, InputError> {
        find_by_name(&self.gpus, "GPU", name, |g| &g.name)
    }
}

/// The item of `items` named `name` (case-insensitive), or
/// [`InputError::Unknown`] listing every name.
fn find_by_name<'a, T>(
    items: &'a [T],
    kind: &'static str,
    name: &str,
    name_of: impl Fn(&T) -> &String,
) -> Result<&'a T, InputError> {
    items
        .iter()
        .find(|x| name_of(x).eq_ignore_ascii_case(name))
        .ok_or_else(|| InputError::Unknown {
            kind,
            name: name.to_string(),
            suggestion: crate::error::closest(name, items.iter().map(|x| name_of(x).as_str())),
            known: items
                .iter()
                .map(|x| name_of(x).as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })
}
