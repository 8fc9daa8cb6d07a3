//! The shipped catalog: every model card reproduces its published parameter
//! count from its architecture, names resolve, and every cluster's GPU exists.

use meshplan::spec::Catalog;

fn catalog() -> Catalog {
    Catalog::shipped().expect("the shipped catalog loads")
}

/// Relative error allowed between `total_params()` and the published count.
const TOLERANCE: f64 = 0.005;

#[test]
fn every_model_reproduces_its_published_total() {
    let c = catalog();
    assert!(!c.models.is_empty(), "no model cards shipped");
    for m in &c.models {
        let total = m.total_params();
        let rel = total / m.known_params - 1.0;
        assert!(
            rel.abs() < TOLERANCE,
            "{}: total_params() = {:.6e} but known_params = {:.6e} ({:+.3}%)",
            m.name,
            total,
            m.known_params,
            rel * 100.0
        );
    }
}

#[test]
fn every_moe_model_reproduces_its_published_active_count() {
    let c = catalog();
    for m in &c.models {
        let Some(known) = m.known_active_params else {
            continue;
        };
        let active = m.active_params();
        let rel = active / known - 1.0;
        assert!(
            rel.abs() < TOLERANCE,
            "{}: active_params() = {:.6e} but known_active_params = {:.6e} ({:+.3}%)",
            m.name,
            active,
            known,
            rel * 100.0
        );
    }
}

#[test]
fn dense_models_have_active_equal_to_total() {
    let c = catalog();
    for m in c.models.iter().filter(|m| m.moe.is_none()) {
        assert_eq!(m.active_params(), m.total_params(), "{}", m.name);
        assert!(
            m.known_active_params.is_none(),
            "{}: dense card gives known_active_params",
            m.name
        );
    }
}

/// Llama-3 70B worked by hand (h = 8192, L = 80, 64 query / 8 kv heads of
/// width 128, SwiGLU ffn 28672, V = 128256, RMSNorm, untied):
///
/// per layer:  Q and O        2·8192·8192   = 134,217,728
///             K and V        2·8192·1024   =  16,777,216
///             MLP            3·8192·28672  = 704,643,072
///             two RMSNorms   2·8192        =      16,384
///             sum                            855,654,400
/// 80 layers                                68,452,352,000
/// embedding + output  2·128256·8192       =  2,101,346,304
/// final RMSNorm                                    8,192
/// total                                   70,553,706,496  (≈ 70.55e9)
///
/// which is the parameter count of the released checkpoint.
#[test]
fn llama3_70b_total_by_hand() {
    let c = catalog();
    let m = c.model("llama3-70b").expect("llama3-70b is shipped");
    let h: u64 = 8192;
    let per_layer = 2 * h * h + 2 * h * 1024 + 3 * h * 28672 + 2 * h;
    let expected = 80 * per_layer + 2 * 128_256 * h + h;
    assert_eq!(expected, 70_553_706_496);
    assert_eq!(
        m.total_params(),
        expected as f64,
        "llama3-70b total_params()"
    );
}

/// Mixtral 8x7B active count by hand (h = 4096, L = 32, 32 query / 8 kv heads
/// of width 128, 8 SwiGLU experts of width 14336, top-2, V = 32000, untied):
///
/// per layer:  attention  2·4096·4096 + 2·4096·1024 =    41,943,040
///             2 experts  2·3·4096·14336             =   352,321,536
///             router     4096·8                     =        32,768
///             two norms  2·4096                     =         8,192
///             sum                                       394,305,536
/// 32 layers                                          12,617,777,152
/// embedding + output  2·32000·4096                  =   262,144,000
/// final norm                                                  4,096
/// active                                             12,879,925,248  (≈ 12.9e9)
#[test]
fn mixtral_8x7b_active_by_hand() {
    let c = catalog();
    let m = c.model("mixtral-8x7b").expect("mixtral-8x7b is shipped");
    let h: u64 = 4096;
    let per_layer = 2 * h * h + 2 * h * 1024 + 2 * 3 * h * 14336 + h * 8 + 2 * h;
    let expected = 32 * per_layer + 2 * 32_000 * h + h;
    assert_eq!(expected, 12_879_925_248);
    assert_eq!(
        m.active_params(),
        expected as f64,
        "mixtral-8x7b active_params()"
    );
    let rel = m.active_params() / 12.9e9 - 1.0;
    assert!(
        rel.abs() < TOLERANCE,
        "mixtral-8x7b active {:.4e}",
        m.active_params()
    );
}

#[test]
fn alias_70b_resolves_to_llama3_70b() {
    let c = catalog();
    assert_eq!(c.model("70b").expect("alias 70b").name, "llama3-70b");
    assert_eq!(
        c.model("70B").expect("aliases are case-insensitive").name,
        "llama3-70b"
    );
    assert_eq!(
        c.model("LLAMA3-70B")
            .expect("names are case-insensitive")
            .name,
        "llama3-70b"
    );
}

#[test]
fn names_and_aliases_are_unique() {
    let c = catalog();
    let mut seen = std::collections::HashSet::new();
    for m in &c.models {
        for key in std::iter::once(&m.name).chain(m.aliases.iter()) {
            assert!(
                seen.insert(key.to_ascii_lowercase()),
                "name or alias `{key}` appears twice"
            );
        }
    }
    let mut gpus = std::collections::HashSet::new();
    for g in &c.gpus {
        assert!(
            gpus.insert(g.name.to_ascii_lowercase()),
            "GPU `{}` appears twice",
            g.name
        );
    }
    let mut clusters = std::collections::HashSet::new();
    for cl in &c.clusters {
        assert!(
            clusters.insert(cl.name.to_ascii_lowercase()),
            "cluster `{}` appears twice",
            cl.name
        );
    }
}

#[test]
fn unknown_model_lists_known_names() {
    let c = catalog();
    let err = c
        .model("nope")
        .expect_err("`nope` is not a model")
        .to_string();
    assert!(err.contains("nope"), "message names the request: {err}");
    for m in &c.models {
        assert!(err.contains(&m.name), "message lists `{}`: {err}", m.name);
    }
    assert!(err.contains("70b"), "message lists aliases: {err}");
}

#[test]
fn every_cluster_names_a_shipped_gpu() {
    let c = catalog();
    assert!(!c.clusters.is_empty(), "no cluster profiles shipped");
    for cl in &c.clusters {
        let gpu = c
            .gpu(&cl.gpu)
            .unwrap_or_else(|e| panic!("cluster {}: {e}", cl.name));
        assert_eq!(gpu.name, cl.gpu);
        // 8-GPU NVLink nodes, except the NVL72 racks (72 GPUs over 4-GPU
        // trays, of which a job takes 16 trays: 64 GPUs) and the 4-GPU
        // H200 nodes of the KempnerForge rows.
        let (domain, job_domain) = if cl.name.contains("nvl72") {
            (72, 64)
        } else if cl.name == "h200-4gpu-160" {
            (4, 4)
        } else {
            (8, 8)
        };
        assert_eq!(cl.scale_up_domain, domain, "{}: scale_up_domain", cl.name);
        assert_eq!(cl.fast_domain(), job_domain, "{}: fast_domain", cl.name);
        assert_eq!(c.cluster(&cl.name).expect("cluster lookup").name, cl.name);
    }
}

/// Every shipped cluster prices a ring step at NCCL's own Simple-protocol
/// figures (NVIDIA/nccl `src/graph/tuning.cc` at 5067397, `hwLatencies`:
/// NVLINK Ring 3.4 µs, NET Ring 14 µs; docs/references.md [nccl-tuning]),
/// and no tier adds a latency of its own (none is sourced).
#[test]
fn every_cluster_takes_nccls_ring_step_latencies() {
    let c = catalog();
    for cl in &c.clusters {
        assert_eq!(cl.intra_node.latency_us, 3.4, "{}: intra_node", cl.name);
        assert_eq!(cl.inter_node.latency_us, 14.0, "{}: inter_node", cl.name);
        assert_eq!(
            (cl.intra_node.latency_us, cl.inter_node.latency_us),
            (
                meshplan::cost::comm::NCCL_RING_NVLINK_US,
                meshplan::cost::comm::NCCL_RING_NET_US
            )
        );
        for t in &cl.tiers {
            assert_eq!(t.latency_us, None, "{}: tier {}", cl.name, t.name);
        }
    }
}

#[test]
fn expected_entries_are_shipped() {
    let c = catalog();
    for name in [
        "llama2-7b",
        "llama2-13b",
        "llama2-70b",
        "llama3-8b",
        "llama3-70b",
        "llama3-405b",
        "gpt3-175b",
        "gpt-1.7b",
        "gpt-3.6b",
        "gpt-7.5b",
        "gpt-18.4b",
        "gpt-39.1b",
        "gpt-76.1b",
        "gpt-145.6b",
        "gpt-310.1b",
        "gpt-529.6b",
        "gpt-1t",
        "gpt-22b",
        "mixtral-8x7b",
        "mixtral-8x22b",
        "deepseek-v3",
        "qwen3-30b-a3b",
        "qwen3-235b-a22b",
    ] {
        c.model(name).unwrap_or_else(|e| panic!("{e}"));
    }
    for name in ["a100-40g", "a100-80g", "h100-sxm", "h800", "h200", "b200"] {
        c.gpu(name).unwrap_or_else(|e| panic!("{e}"));
    }
    for name in [
        "dgx64",
        "dgx-a100-3072",
        "dgx-h100-64",
        "dgx-h100-1024",
        "h100-16k",
        "dgx-h100-6144",
        "h800-2048",
        "h800-8",
        "h200-64",
    ] {
        c.cluster(name).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// The router and norm fields of a card are checked as Megatron-LM's
/// `TransformerConfig.__post_init__` checks them: the expert bias needs
/// sigmoid scores, the groups must divide the experts and come with a
/// group top-k no larger than them.
#[test]
fn router_fields_are_checked_like_megatron() {
    use meshplan::spec::Model;
    use std::path::Path;
    let text = std::fs::read_to_string("models/deepseek-v3.toml").unwrap();
    let card = |from: &str, to: &str| {
        assert!(text.contains(from), "{from}");
        Model::from_toml(&text.replace(from, to), Path::new("ds.toml")).map(|_| ())
    };
    assert!(card("groups = 8 ", "groups = 8 ").is_ok());
    let e = card(
        "score_function = \"sigmoid\"",
        "score_function = \"softmax\"",
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("ds.toml: field `moe.expert_bias`: needs score_function = \"sigmoid\""),
        "{e}"
    );
    let e = card("groups = 8 ", "groups = 7 ").unwrap_err();
    assert_eq!(
        e.to_string(),
        "ds.toml: field `moe.groups`: 7 groups do not divide 256 experts"
    );
    let e = card("group_top_k = 4 ", "group_top_k = 9 ").unwrap_err();
    assert_eq!(
        e.to_string(),
        "ds.toml: field `moe.group_top_k`: must be 1 to groups (8), found 9"
    );
    let e = card("norm_epsilon = 1e-6", "norm_epsilon = 0.5").unwrap_err();
    assert_eq!(
        e.to_string(),
        "ds.toml: field `architecture.norm_epsilon`: must be a small positive number in [1e-12, 0.1), found 0.5"
    );
    // 256 experts in 256 groups of one: top-8 over 4 groups reaches 4.
    let e = card("groups = 8 ", "groups = 256 ").unwrap_err();
    assert!(
        e.to_string()
            .contains("256 groups of 1 expert(s) with group_top_k 4 cannot route top_k 8"),
        "{e}"
    );
    let e = card("score_function = \"sigmoid\"", "score_function = \"relu\"").unwrap_err();
    assert_eq!(
        e.to_string(),
        "ds.toml: field `moe.score_function`: `relu` is not one of softmax, sigmoid"
    );
}

/// A user card whose name is a shipped card's alias is the one found by
/// that name: `import-model` names Llama 3.1 405B `llama-3.1-405b`, an
/// alias of the shipped `llama3-405b`, and an edited import must not be
/// ignored.
#[test]
fn a_cards_name_wins_over_another_cards_alias() {
    let dir = std::env::temp_dir().join(format!("meshplan-alias-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = std::fs::read_to_string("models/llama3-8b.toml").unwrap();
    let name_line = text.lines().find(|l| l.starts_with("name = ")).unwrap();
    let alias_line = text.lines().find(|l| l.starts_with("aliases = ")).unwrap();
    let card = text
        .replace(name_line, "name = \"llama-3.1-405b\"")
        .replace(alias_line, "aliases = []");
    std::fs::write(dir.join("llama-3.1-405b.toml"), card).unwrap();
    let mut cat = catalog();
    assert_eq!(
        cat.model("llama-3.1-405b").unwrap().architecture.layers,
        126
    );
    cat.add_models_dir(&dir).unwrap();
    // The user's card (32 layers, the 8B's) by its name; the shipped one
    // still by its own name and other aliases.
    assert_eq!(cat.model("llama-3.1-405b").unwrap().architecture.layers, 32);
    assert_eq!(cat.model("llama3-405b").unwrap().architecture.layers, 126);
    assert_eq!(cat.model("405b").unwrap().architecture.layers, 126);
    std::fs::remove_dir_all(&dir).ok();
}

/// A user card that replaces a shipped one by name keeps the shipped
/// card's aliases: `--model 8b` in a team's scripts selects the user's
/// `llama3-8b` (here edited to 16 layers), and the notes say what was
/// replaced, which aliases carried over, and that the file name `mine`
/// does not select it.
#[test]
fn a_replacing_card_keeps_the_shipped_aliases() {
    let dir = std::env::temp_dir().join(format!("meshplan-replace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = std::fs::read_to_string("models/llama3-8b.toml").unwrap();
    let alias_line = text.lines().find(|l| l.starts_with("aliases = ")).unwrap();
    let layers_line = text.lines().find(|l| l.starts_with("layers = ")).unwrap();
    let card = text
        .replace(alias_line, "aliases = []")
        .replace(layers_line, "layers = 16");
    std::fs::write(dir.join("mine.toml"), card).unwrap();
    let mut cat = catalog();
    let shipped_aliases = cat.model("llama3-8b").unwrap().aliases.clone();
    assert!(shipped_aliases.iter().any(|a| a == "8b"));
    let notes = cat.add_models_dir(&dir).unwrap();
    for a in &shipped_aliases {
        assert_eq!(cat.model(a).unwrap().architecture.layers, 16, "{a}");
    }
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(notes[0].contains("replaces the shipped model card `llama3-8b`"));
    assert!(notes[0].contains("`8b`"));
    assert!(notes[1].contains("not by the file name `mine`"));
    std::fs::remove_dir_all(&dir).ok();
}

/// A user card named like a shipped card's alias (`70b`, an alias of
/// `llama3-70b`) takes the word over, as a name wins over an alias: the
/// alias leaves the shipped card (so `list` no longer shows it there) and a
/// note says so.
#[test]
fn a_name_that_was_an_alias_takes_it_over_with_a_note() {
    let dir = std::env::temp_dir().join(format!("meshplan-alias-name-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = std::fs::read_to_string("models/llama3-70b.toml").unwrap();
    let name_line = text.lines().find(|l| l.starts_with("name = ")).unwrap();
    let alias_line = text.lines().find(|l| l.starts_with("aliases = ")).unwrap();
    let layers_line = text.lines().find(|l| l.starts_with("layers = ")).unwrap();
    let card = text
        .replace(name_line, "name = \"70b\"")
        .replace(alias_line, "aliases = []")
        .replace(layers_line, "layers = 40");
    std::fs::write(dir.join("70b.toml"), card).unwrap();
    let mut cat = catalog();
    let notes = cat.add_models_dir(&dir).unwrap();
    assert_eq!(cat.model("70b").unwrap().architecture.layers, 40);
    assert_eq!(cat.model("llama3-70b").unwrap().architecture.layers, 80);
    assert!(
        !cat.model("llama3-70b")
            .unwrap()
            .aliases
            .iter()
            .any(|a| a == "70b")
    );
    assert!(
        notes
            .iter()
            .any(|n| n.contains("its name `70b` was an alias of llama3-70b")),
        "{notes:?}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
