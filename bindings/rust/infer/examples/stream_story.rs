//! Streams a story from stories260K.gguf and prints TTFT and tokens/s.
//!   cargo run --example stream_story [MODEL.gguf] [PROMPT]
use std::io::Write;

fn main() -> Result<(), infer::Error> {
    let mut args = std::env::args().skip(1);
    let shared = std::env::var("INFER_SHARED_DIR")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../../../../shared").to_string());
    let path = args.next().unwrap_or(format!("{}/models/stories260K.gguf", shared));
    let prompt = args.next().unwrap_or_else(|| "Once upon a time".to_string());
    let model = infer::Model::load(&path)?;
    let engine = infer::Engine::new(&model, &infer::EngineParams::default())?;
    let params = infer::GenerateParams { max_tokens: 256, temperature: 0.8, seed: 42, ..Default::default() };
    let mut request = engine.submit(&prompt, &params)?;
    let mut out = std::io::stdout();
    print!("{}", prompt);
    for piece in request.pieces() {
        print!("{}", piece?);
        out.flush().ok();
    }
    println!();
    let st = request.stats()?;
    eprintln!("TTFT {:.2} ms, {} tokens, {:.1} tokens/s (decode), finish: {:?}", st.ttft_ms,
              st.n_generated_tokens, st.decode_tokens_per_s, st.finish_reason);
    Ok(())
}
