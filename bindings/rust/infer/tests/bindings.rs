//! The Rust bindings against libinfer and stories260K.gguf. Tests that need
//! the model print "SKIP" and return when ../shared is absent (the CTest
//! wrapper then reports the run as skipped).
use infer::{ChatMessage, Engine, EngineParams, GenerateParams, Model, ModelParams, Status};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const PROMPT: &str = "Once upon a time";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

fn model_path() -> Option<PathBuf> {
    let shared = std::env::var_os("INFER_SHARED_DIR").map(PathBuf::from).unwrap_or_else(|| repo().join("../shared"));
    let p = shared.join("models/stories260K.gguf");
    if p.exists() {
        Some(p)
    } else {
        eprintln!("SKIP: {} is absent (set INFER_SHARED_DIR)", p.display());
        None
    }
}

macro_rules! model_or_skip {
    () => {
        match model_path() {
            Some(p) => p,
            None => return,
        }
    };
}

fn greedy(n: i32) -> GenerateParams {
    GenerateParams { max_tokens: n, temperature: 0.0, ..Default::default() }
}

fn small_engine(model: &Model) -> Engine {
    Engine::new(model, &EngineParams { n_threads: 2, ..Default::default() }).unwrap()
}

/// The C compiler's layout (bindings/layout/infer_layout.c).
fn c_layout() -> HashMap<String, usize> {
    let exe = match std::env::var("INFER_LAYOUT") {
        Ok(e) => PathBuf::from(e),
        Err(_) => {
            let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("infer_layout");
            let st = Command::new("cc")
                .args(["-std=c99", "-I"])
                .arg(repo().join("include"))
                .arg(repo().join("bindings/layout/infer_layout.c"))
                .arg("-o")
                .arg(&out)
                .status()
                .expect("cc");
            assert!(st.success());
            out
        }
    };
    let out = Command::new(exe).output().expect("infer_layout");
    let mut m = HashMap::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let (k, v) = line.rsplit_once(' ').unwrap();
        m.insert(k.to_string(), v.parse().unwrap());
    }
    m
}

#[test]
fn version_checked_and_layouts_match_c() {
    let c = c_layout();
    assert_eq!(infer::version_number() as usize, c["version_number"]);
    assert_eq!(infer::sys::INFER_VERSION_NUMBER as usize, c["version_number"]);
    infer::check_version().unwrap();
    let mut n_structs = 0;
    for (name, size, fields) in infer::sys::layouts() {
        assert_eq!(size, c[&format!("{} sizeof", name)], "sizeof {}", name);
        let c_fields = c.keys().filter(|k| k.starts_with(&format!("{}.", name))).count();
        assert_eq!(fields.len(), c_fields, "field count of {}", name);
        for (f, off) in fields {
            assert_eq!(off, c[&format!("{}.{}", name, f)], "offsetof {}.{}", name, f);
        }
        n_structs += 1;
    }
    assert_eq!(n_structs, c.keys().filter(|k| k.ends_with(" sizeof")).count(), "every C struct is mirrored");
    for (k, v) in &c {
        if k.ends_with(" enum") {
            assert_eq!(*v, 4, "{} is 32 bits", k);
        }
    }
}

#[test]
fn load_info_tokenize() {
    let path = model_or_skip!();
    let model = Model::load(&path).unwrap();
    let info = model.info();
    assert_eq!(info.architecture, "llama");
    assert_eq!(info.n_vocab, 512);
    assert_eq!(model.meta("general.architecture").unwrap().as_deref(), Some("llama"));
    assert_eq!(model.meta("no.such.key").unwrap(), None);
    let toks = model.tokenize("Hello world", None, false).unwrap();
    assert_eq!(Some(toks[0]), info.bos_token);
    assert_eq!(model.detokenize(&toks, false).unwrap(), "Hello world");
    assert!(infer::chat_templates().iter().any(|t| t == "chatml"));
    let p = model
        .apply_chat_template(&[ChatMessage { role: "user", content: "Hi" }], Some("chatml"), true)
        .unwrap();
    assert!(p.ends_with("<|im_start|>assistant\n"));
}

#[test]
fn greedy_equals_c_api() {
    let path = model_or_skip!();
    let model = Model::load(&path).unwrap();
    let engine = small_engine(&model);
    for prompt in [PROMPT, "The little dog", ""] {
        let c = model.generate(prompt, &greedy(48)).unwrap(); // infer_generate
        assert!(!c.is_empty());
        assert_eq!(engine.generate(prompt, &greedy(48)).unwrap(), c);
        let streamed: String = engine.stream(prompt, &greedy(48)).unwrap().map(|p| p.unwrap()).collect();
        assert_eq!(streamed, c);
    }
    if let Ok(cli) = std::env::var("INFER_CLI") {
        let out = Command::new(cli)
            .args(["run", "-m"])
            .arg(&path)
            .args(["-p", PROMPT, "-n", "32", "--temp", "0"])
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        assert_eq!(text.strip_prefix(PROMPT).unwrap().trim_end_matches('\n'), model.generate(PROMPT, &greedy(32)).unwrap());
    }
}

#[test]
fn streaming_never_splits_utf8() {
    let path = model_or_skip!();
    let model = Model::load(&path).unwrap();
    let engine = small_engine(&model);
    // Only the byte tokens of "€" (E2 82 AC) may be drawn.
    let allowed = [3 + 0xE2, 3 + 0x82, 3 + 0xAC];
    assert_eq!(model.token_piece(allowed[0]).unwrap(), vec![0xE2u8]);
    let bias: Vec<(i32, f32)> =
        (0..512).map(|t| (t, if allowed.contains(&t) { 0.0 } else { f32::NEG_INFINITY })).collect();
    for seed in 0..8 {
        let params = GenerateParams { max_tokens: 60, temperature: 1.0, top_k: 0, top_p: 1.0, min_p: 0.0, seed,
                                      ignore_eos: true, logit_bias: bias.clone(), ..Default::default() };
        let mut req = engine.submit(PROMPT, &params).unwrap();
        let pieces: Vec<String> = req.pieces().map(|p| p.unwrap()).collect(); // from_utf8 checks each
        assert_eq!(pieces.concat(), req.text().unwrap());
        assert_eq!(req.stats().unwrap().n_generated_tokens, 60);
    }
}

#[test]
fn many_prompts_at_once() {
    let path = model_or_skip!();
    let model = Model::load(&path).unwrap();
    let engine = small_engine(&model);
    let prompts: Vec<String> = ["a cat", "a dog", "a bird", "Tim", "Sue", "the sea", "a cake", "a frog"]
        .iter()
        .map(|w| format!("{} {}", PROMPT, w))
        .collect();
    let texts = engine.generate_batch(&prompts, &greedy(24)).unwrap();
    for (p, t) in prompts.iter().zip(&texts) {
        assert_eq!(t, &model.generate(p, &greedy(24)).unwrap());
    }
    // the model and engine shared by threads
    let expected = model.generate(PROMPT, &greedy(24)).unwrap();
    let (expected, engine) = (&expected, &engine);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(move || assert_eq!(&engine.generate(PROMPT, &greedy(24)).unwrap(), expected));
            let m = model.clone();
            s.spawn(move || assert_eq!(&m.generate(PROMPT, &greedy(24)).unwrap(), expected));
        }
    });
}

#[test]
fn cancel_from_another_thread_and_by_drop() {
    let path = model_or_skip!();
    let model = Model::load(&path).unwrap();
    let engine = small_engine(&model);
    let long = GenerateParams { max_tokens: 1500, ignore_eos: true, ..Default::default() };
    let mut req = engine.submit(PROMPT, &long).unwrap();
    let canceller = req.canceller();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let t = std::thread::spawn(move || {
        rx.recv().unwrap();
        canceller.cancel();
    });
    let mut n = 0;
    for piece in req.pieces() {
        piece.unwrap();
        if n == 0 {
            tx.send(()).unwrap();
        }
        n += 1;
    }
    t.join().unwrap();
    let st = req.stats().unwrap();
    assert_eq!(st.finish_reason, infer::FinishReason::Cancelled);
    assert!(st.n_generated_tokens < 1500);

    // Dropping a stream cancels its request.
    let t0 = Instant::now();
    let mut stream = engine.stream(PROMPT, &long).unwrap();
    stream.next().unwrap().unwrap();
    drop(stream);
    engine.wait_idle().unwrap();
    assert_eq!(engine.stats().unwrap().n_running, 0);
    assert!(t0.elapsed() < Duration::from_secs(5));
}

#[test]
fn native_errors() {
    let e = Model::load("/nonexistent/model.gguf").unwrap_err();
    assert_eq!(e.status, Status::Io);
    assert!(!e.message.is_empty());
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let bad = dir.join("bad.gguf");
    let mut bytes = b"GGUF\x03\x00\x00\x00".to_vec();
    bytes.extend(std::iter::repeat(0xffu8).take(200));
    std::fs::write(&bad, bytes).unwrap();
    assert_eq!(Model::load(&bad).unwrap_err().status, Status::Format);
    let path = model_or_skip!();
    let trunc = dir.join("trunc.gguf");
    std::fs::write(&trunc, &std::fs::read(&path).unwrap()[..5000]).unwrap();
    assert!(!Model::load(&trunc).unwrap_err().message.is_empty());
    let model = Model::load(&path).unwrap();
    let engine = small_engine(&model);
    let e = engine.generate(PROMPT, &GenerateParams { max_tokens: -1, ..Default::default() }).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument);
    let e = engine.generate(PROMPT, &GenerateParams { top_p: 7.0, ..Default::default() }).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument);
    assert_eq!(engine.submit_tokens(&[100000], &greedy(4)).err().unwrap().status, Status::InvalidArgument);
    assert!(Engine::new(&model, &EngineParams { kv_block_size: -5, ..Default::default() }).is_err());
    assert_eq!(model.generate("x\0y", &greedy(4)).unwrap_err().status, Status::InvalidArgument);
    assert!(!engine.generate(PROMPT, &greedy(4)).unwrap().is_empty());
}

fn rss_kb() -> usize {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap();
    s.split_whitespace().nth(1).unwrap().parse::<usize>().unwrap() * 4
}

#[test]
fn no_leak_across_1000_cycles() {
    let path = model_or_skip!();
    let params = EngineParams { n_threads: 1, kv_blocks: 64, max_seqs: 2, ..Default::default() };
    let cycle = || {
        let model = Model::load(&path).unwrap();
        let engine = Engine::new(&model, &params).unwrap();
        engine.generate(PROMPT, &greedy(2)).unwrap();
        drop(engine);
        drop(model);
        let _ = Model::load("/nonexistent.gguf").unwrap_err();
    };
    for _ in 0..100 {
        cycle();
    }
    let before = rss_kb();
    for _ in 0..1000 {
        cycle();
    }
    let grown = rss_kb() as i64 - before as i64;
    assert!(grown < 4096, "RSS grew by {} KiB over 1000 cycles", grown);
}

#[test]
fn requests_outlive_engine_and_model() {
    let path = model_or_skip!();
    let req = {
        let model = Model::load(&path).unwrap();
        let engine = small_engine(&model);
        let req = engine.submit(PROMPT, &greedy(8)).unwrap();
        engine.wait_idle().unwrap();
        req
    }; // engine and model handles dropped here
    assert!(!req.wait_text().unwrap().is_empty());
}

#[test]
fn every_function_of_infer_h_is_declared_in_infer_sys() {
    // infer.h as built against: a new C function must be added to infer-sys.
    let header = std::fs::read_to_string(repo().join("include/infer/infer.h")).unwrap();
    let sys_src = include_str!("../../infer-sys/src/lib.rs");
    let mut missing = Vec::new();
    let mut n = 0;
    for decl in header.split("INFER_API").skip(1) {
        let head = decl.split('(').next().unwrap();
        let name = head.split(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|w| !w.is_empty()).last().unwrap();
        if !name.starts_with("infer_") {
            continue; // the INFER_API macro's own definition
        }
        n += 1;
        if !sys_src.contains(&format!("pub fn {}(", name)) {
            missing.push(name.to_string());
        }
    }
    assert!(n > 50, "only {} declarations found", n);
    assert!(missing.is_empty(), "infer-sys lacks: {:?}", missing);
}

/// Issue 27: dropping the engine under a live stream ends the stream with
/// Err(Cancelled), never silently; the caller's own cancel is no error.
#[test]
fn dropping_the_engine_ends_a_live_stream_with_an_error() {
    let path = model_or_skip!();
    let model = Model::load(&path).unwrap();
    let engine = small_engine(&model);
    let long = GenerateParams { max_tokens: 2000, ignore_eos: true, ..Default::default() };
    let mut stream = engine.stream(PROMPT, &long).unwrap();
    stream.next().unwrap().unwrap();
    drop(engine);
    drop(model);
    let mut last = None;
    for piece in stream.by_ref() {
        last = Some(piece);
    }
    let err = last.expect("the stream ended without a word").unwrap_err();
    assert_eq!(err.status, Status::Cancelled, "{}", err);
    assert!(err.message.contains("engine was dropped"), "{}", err);
    assert_eq!(stream.request().stats().unwrap().finish_reason, infer::FinishReason::Cancelled);

    // wait_text too.
    let model = Model::load(&path).unwrap();
    let engine = small_engine(&model);
    let req = engine.submit(PROMPT, &long).unwrap();
    drop(engine);
    assert_eq!(req.wait_text().unwrap_err().status, Status::Cancelled);

    // The request's own cancel ends it without an error.
    let engine = small_engine(&model);
    let mut stream = engine.stream(PROMPT, &long).unwrap();
    stream.next().unwrap().unwrap();
    stream.request().cancel();
    for piece in stream.by_ref() {
        piece.unwrap();
    }
}

/// Issue 27: text that C would cut at a NUL byte is refused by name.
#[test]
fn nul_bytes_in_c_strings_are_refused_by_name() {
    let path = model_or_skip!();
    let model = Model::load(&path).unwrap();
    let engine = small_engine(&model);
    let p = GenerateParams { stop: vec!["ok".into(), "a\0".into()], ..greedy(4) };
    let e = engine.submit(PROMPT, &p).err().unwrap();
    assert_eq!(e.status, Status::InvalidArgument);
    assert!(e.message.contains("stop[1]"), "{}", e.message);
    let e = model.generate("x\0y", &greedy(4)).unwrap_err();
    assert!(e.message.contains("prompt"), "{}", e.message);
    let e = model.meta("general.\0name").unwrap_err();
    assert!(e.message.contains("key"), "{}", e.message);
    let msgs = [ChatMessage { role: "user", content: "hi\0" }];
    let e = model.apply_chat_template(&msgs, Some("chatml"), true).unwrap_err();
    assert!(e.message.contains("messages[0].content"), "{}", e.message);
    // A prompt's NUL bytes are text (its length is passed).
    engine.generate("a\0b", &greedy(2)).unwrap();
}

/// A synth preset written with $INFER_CLI (None, and the test returns, without it).
fn synth_model(preset: &str) -> Option<PathBuf> {
    let cli = std::env::var("INFER_CLI").ok()?;
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{}.gguf", preset));
    let st = Command::new(cli)
        .args(["synth", "--preset", preset, "--type", "f32", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(st.status.success(), "infer synth {}", preset);
    Some(out)
}

#[test]
fn embed_and_rerank_on_tiny_bert() {
    let path = match synth_model("tiny-bert") {
        Some(p) => p,
        None => return,
    };
    let model = Model::load(&path).unwrap();
    let v = model.embed(&["hello world", "the quick brown fox"]).unwrap();
    assert_eq!(v.len(), 2);
    assert_eq!(v[0].len(), 64);
    for r in &v {
        let n: f32 = r.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((n - 1.0).abs() < 1e-4);
    }
    let alone = model.embed(&["hello world"]).unwrap();
    for (a, b) in alone[0].iter().zip(&v[0]) {
        assert!((a - b).abs() < 1e-5);
    }
    let opts = infer::EmbedOptions { dimensions: 16, ..Default::default() };
    assert_eq!(model.embed_with(&["hello"], &opts).unwrap()[0].len(), 16);
    assert_eq!(model.embed(&[""]).unwrap_err().status, Status::InvalidArgument);
    assert_eq!(model.embed(&[]).unwrap_err().status, Status::InvalidArgument);
    assert_eq!(model.rerank("q", &["d"]).unwrap_err().status, Status::InvalidArgument); // no head

    let rpath = match synth_model("tiny-bert-rerank") {
        Some(p) => p,
        None => return,
    };
    let rr = Model::load(&rpath).unwrap();
    let s = rr.rerank("quick fox", &["the fox", "a dog", "hello"]).unwrap();
    assert_eq!(s.len(), 3);
    let one = rr.rerank("quick fox", &["a dog"]).unwrap();
    assert!((one[0] - s[1]).abs() < 1e-5);
}

#[test]
fn tensor_parallel_accessors_on_a_whole_model() {
    let path = model_or_skip!();
    let model = Model::load(&path).unwrap();
    assert_eq!(model.tp_rank(), 0);
    assert_eq!(model.tp_size(), 1);
    // A whole model has no rank 0 engine to follow.
    let err = model.follow(&EngineParams::default()).unwrap_err();
    assert_eq!(err.status, Status::InvalidArgument);
    // tensor_parallel must be 0 or the model's group size.
    let bad = EngineParams { tensor_parallel: 2, ..Default::default() };
    assert!(Engine::new(&model, &bad).is_err());
    let engine = Engine::new(&model, &EngineParams { n_threads: 2, tensor_parallel: 1, ..Default::default() }).unwrap();
    engine.generate("Once upon a time", &greedy(4)).unwrap();
    let st = engine.stats().unwrap();
    assert_eq!((st.tp_comm_calls, st.tp_comm_bytes, st.tp_comm_seconds), (0, 0, 0.0));
    // The loader's tensor_parallel 1 is a whole model too.
    let one = Model::load_with(&path, &ModelParams { tensor_parallel: 1, ..Default::default() }).unwrap();
    assert_eq!(one.tp_size(), 1);
}
