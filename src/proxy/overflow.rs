//! Provider context-overflow errors: whether an upstream error says the prompt did not fit, and
//! the token figures it gives (the window, the prompt's size), which SOBA learns the session's
//! real window from. Pure: the wordings of OpenAI, Anthropic, Gemini, OpenRouter, vLLM,
//! llama.cpp, Ollama and the OpenAI-compatible servers that copy them.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use soba_core::window::OverflowFigures;

/// Phrases that only a context overflow uses (lowercase).
const OVERFLOW_PHRASES: &[&str] = &[
    "context_length_exceeded",
    "context length exceeded",
    "maximum context length",
    "prompt is too long",
    "exceed context limit",
    "exceeds the context window",
    "input is too long for requested model",
    "exceeds the maximum number of tokens allowed",
    "maximum prompt length is",
    "reduce the length of the messages",
    "maximum allowed input length",
    "longer than the model's context length",
    "exceeds the available context size",
    "exceed_context_size_error",
    "greater than the context length",
    "context window exceeds limit",
    "exceeded model token limit",
    "maximum context length of",
    "prompt too long; exceeded",
    "model_context_window_exceeded",
    "request_too_large",
    "token limit exceeded",
    "too many tokens",
];

/// Errors that share words with an overflow but are not one: throttling.
const NOT_OVERFLOW_PHRASES: &[&str] = &["rate limit", "too many requests", "throttl"];

/// One wording with figures: which capture is the window and which the prompt's tokens.
struct Wording {
    pattern: Regex,
    window: Option<usize>,
    prompt: Option<usize>,
}

fn wording(pattern: &str, window: Option<usize>, prompt: Option<usize>) -> Wording {
    Wording {
        pattern: Regex::new(&format!("(?is){pattern}")).expect("a valid overflow pattern"),
        window,
        prompt,
    }
}

const N: &str = r"(\d[\d,]*)";

static WORDINGS: LazyLock<Vec<Wording>> = LazyLock::new(|| {
    let n = N;
    vec![
        // Anthropic: "prompt is too long: 213462 tokens > 200000 maximum".
        wording(
            &format!(r"prompt is too long: {n} tokens > {n} maximum"),
            Some(2),
            Some(1),
        ),
        // Anthropic: "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000".
        wording(
            &format!(r"exceed context limit: {n} \+ {n} > {n}"),
            Some(3),
            Some(1),
        ),
        // llama.cpp (and Ollama in front of it): "request (41533 tokens) exceeds the available
        // context size (32768 tokens)".
        wording(
            &format!(r"request \({n} tokens\) exceeds the available context size \({n} tokens\)"),
            Some(2),
            Some(1),
        ),
        // Gemini: "The input token count (1196265) exceeds the maximum number of tokens allowed
        // (1048575)".
        wording(
            &format!(
                r"input token count \({n}\) exceeds the maximum number of tokens allowed \({n}\)"
            ),
            Some(2),
            Some(1),
        ),
        // xAI: "This model's maximum prompt length is 131072 but the request contains 537812
        // tokens".
        wording(
            &format!(r"maximum prompt length is {n} but the request contains {n} tokens"),
            Some(1),
            Some(2),
        ),
        // Together AI: "The input (X tokens) is longer than the model's context length (Y tokens)".
        wording(
            &format!(
                r"input \({n} tokens\) is longer than the model'?s context length \({n} tokens\)"
            ),
            Some(2),
            Some(1),
        ),
        // OpenAI-compatible servers: "Input length (265330) exceeds model's maximum context
        // length (262144)".
        wording(
            &format!(
                r"input length \({n}\) exceeds (?:the )?model'?s maximum context length \({n}\)"
            ),
            Some(2),
            Some(1),
        ),
        // OpenRouter / Poolside: "Input length X exceeds the maximum allowed input length of Y
        // tokens".
        wording(
            &format!(r"input length {n} exceeds the maximum allowed input length of {n}"),
            Some(2),
            Some(1),
        ),
        // GitHub Copilot: "prompt token count of X exceeds the limit of Y".
        wording(
            &format!(r"prompt token count of {n} exceeds the limit of {n}"),
            Some(2),
            Some(1),
        ),
        // Mistral: "Prompt contains X tokens ... too large for model with Y maximum context
        // length".
        wording(
            &format!(
                r"prompt contains {n} tokens.*?too large for model with {n} maximum context length"
            ),
            Some(2),
            Some(1),
        ),
        // Kimi: "Your request exceeded model token limit: X (requested: Y)".
        wording(
            &format!(r"exceeded model token limit: {n} \(requested: {n}\)"),
            Some(1),
            Some(2),
        ),
        // OpenAI: "This model's maximum context length is 128000 tokens. However, your messages
        // resulted in 130000 tokens."
        wording(
            &format!(
                r"maximum context length is {n} tokens.*?your messages resulted in {n} tokens"
            ),
            Some(1),
            Some(2),
        ),
        // OpenAI, older vLLM, OpenRouter: "... However, you requested 21000 tokens (17000 in the
        // messages, 4000 in the completion)" / "(17000 of text input, ...)".
        wording(
            &format!(
                r"maximum context length is {n} tokens.*?\({n} (?:in the messages|of text input)"
            ),
            Some(1),
            Some(2),
        ),
        // vLLM: "... your prompt contains at least 30000 input tokens".
        wording(
            &format!(
                r"maximum context length is {n} tokens.*?prompt contains at least {n} input tokens"
            ),
            Some(1),
            Some(2),
        ),
        // The window alone: OpenAI, vLLM, OpenRouter, LiteLLM.
        wording(
            &format!(r"maximum context length is {n} tokens"),
            Some(1),
            None,
        ),
        wording(
            &format!(r"maximum context length of {n} tokens"),
            Some(1),
            None,
        ),
    ]
});

/// The figures of a context-overflow error, or `None` when the upstream error is something
/// else. An overflow whose text gives no figures answers `Some` with both left out.
pub fn parse(status: u16, body: &[u8]) -> Option<OverflowFigures> {
    if !(status == 400 || status == 413) {
        return None;
    }
    let json: Option<Value> = serde_json::from_slice(body).ok();
    let text = String::from_utf8_lossy(body);
    let lower = text.to_lowercase();
    if NOT_OVERFLOW_PHRASES.iter().any(|p| lower.contains(p))
        || !OVERFLOW_PHRASES.iter().any(|p| lower.contains(p))
    {
        return None;
    }
    // llama.cpp states both figures as fields too.
    if let Some(e) = json.as_ref().and_then(|v| v.get("error")) {
        let field = |k: &str| e.get(k).and_then(Value::as_u64);
        if let (Some(window), Some(prompt)) = (field("n_ctx"), field("n_prompt_tokens")) {
            return Some(OverflowFigures {
                provider_window: Some(window),
                provider_tokens: Some(prompt),
            });
        }
    }
    // JSON-escaped text ("model\u0027s") reads as the provider wrote it from the parsed body.
    let message = json
        .as_ref()
        .map(|v| collect_strings(v).join("\n"))
        .unwrap_or_else(|| text.into_owned());
    Some(figures_of(&message))
}

/// The figures of an overflow message; both left out when no known wording carries them.
pub fn figures_of(message: &str) -> OverflowFigures {
    let number = |c: &regex::Captures<'_>, i: Option<usize>| {
        i.and_then(|i| c.get(i))
            .and_then(|m| m.as_str().replace(',', "").parse::<u64>().ok())
    };
    WORDINGS
        .iter()
        .find_map(|w| {
            let c = w.pattern.captures(message)?;
            Some(OverflowFigures {
                provider_window: number(&c, w.window),
                provider_tokens: number(&c, w.prompt),
            })
        })
        .unwrap_or_default()
}

/// The proxy's log text for an overflow that was not retried, from the recovery's
/// `CompactionResult`: the size the input could not shrink below, the window, and why.
pub fn not_recovered(compaction: &Value) -> String {
    let number = |k: &str| compaction.get(k).and_then(Value::as_u64).unwrap_or(0);
    let reason = compaction
        .get("reason")
        .and_then(Value::as_str)
        .unwrap_or("no reason given");
    format!(
        "overflow: could not shrink below {} tokens (window {}): {reason}",
        number("tokensAfter"),
        number("contextWindow")
    )
}

fn collect_strings(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a.iter().flat_map(collect_strings).collect(),
        Value::Object(o) => o.values().flat_map(collect_strings).collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn figures(window: Option<u64>, prompt: Option<u64>) -> Option<OverflowFigures> {
        Some(OverflowFigures {
            provider_window: window,
            provider_tokens: prompt,
        })
    }

    fn openai(message: &str) -> Vec<u8> {
        json!({"error": {"message": message, "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}})
            .to_string()
            .into_bytes()
    }

    fn anthropic(message: &str) -> Vec<u8> {
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}})
            .to_string()
            .into_bytes()
    }

    #[test]
    fn openai_names_the_window_and_the_messages_tokens() {
        let body = openai("This model's maximum context length is 128000 tokens. However, your messages resulted in 130532 tokens. Please reduce the length of the messages.");
        assert_eq!(parse(400, &body), figures(Some(128_000), Some(130_532)));
        let body = openai("This model's maximum context length is 16385 tokens. However, you requested 21000 tokens (17000 in the messages, 4000 in the completion). Please reduce the length of the messages or completion.");
        assert_eq!(parse(400, &body), figures(Some(16_385), Some(17_000)));
    }

    #[test]
    fn anthropic_names_the_prompt_and_the_maximum() {
        let body = anthropic("prompt is too long: 213462 tokens > 200000 maximum");
        assert_eq!(parse(400, &body), figures(Some(200_000), Some(213_462)));
        let body = anthropic("input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, decrease input length or `max_tokens` and try again");
        assert_eq!(parse(400, &body), figures(Some(200_000), Some(188_240)));
    }

    #[test]
    fn llama_cpp_gives_its_figures_as_fields_and_in_words() {
        let body = json!({"error": {"code": 400, "message": "request (41533 tokens) exceeds the available context size (32768 tokens), try increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": 41533, "n_ctx": 32768}}).to_string();
        assert_eq!(
            parse(400, body.as_bytes()),
            figures(Some(32_768), Some(41_533))
        );
        let words = "request (20014 tokens) exceeds the available context size (16384 tokens), try increasing it";
        assert_eq!(
            parse(400, json!({"error": words}).to_string().as_bytes()),
            figures(Some(16_384), Some(20_014))
        );
    }

    #[test]
    fn vllm_and_openrouter_wordings() {
        let vllm = openai("This model's maximum context length is 32768 tokens. However, you requested 8000 output tokens and your prompt contains at least 30000 input tokens, for a total of at least 38000 tokens. Please reduce the length of the input prompt or the number of requested output tokens.");
        assert_eq!(parse(400, &vllm), figures(Some(32_768), Some(30_000)));
        let openrouter = openai("This endpoint's maximum context length is 131072 tokens. However, you requested about 140000 tokens (130000 of text input, 10000 in the output). Please reduce the length of either one, or use the \"middle-out\" transform to compress your prompt automatically.");
        assert_eq!(
            parse(400, &openrouter),
            figures(Some(131_072), Some(130_000))
        );
        let litellm = openai(
            "Requested token count exceeds the model's maximum context length of 131072 tokens",
        );
        assert_eq!(parse(400, &litellm), figures(Some(131_072), None));
    }

    #[test]
    fn gemini_xai_together_copilot_mistral_kimi_wordings() {
        let cases = [
            ("The input token count (1196265) exceeds the maximum number of tokens allowed (1048575).", 1_048_575, 1_196_265),
            ("This model's maximum prompt length is 131072 but the request contains 537812 tokens.", 131_072, 537_812),
            ("The input (40000 tokens) is longer than the model's context length (32768 tokens).", 32_768, 40_000),
            ("Input length (265330) exceeds model's maximum context length (262144).", 262_144, 265_330),
            ("prompt token count of 130,000 exceeds the limit of 128,000", 128_000, 130_000),
            ("Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 maximum context length", 32_768, 40_000),
            ("Your request exceeded model token limit: 262144 (requested: 270000)", 262_144, 270_000),
        ];
        for (message, window, prompt) in cases {
            assert_eq!(
                parse(400, &openai(message)),
                figures(Some(window), Some(prompt)),
                "{message}"
            );
        }
    }

    #[test]
    fn an_overflow_without_figures_is_still_an_overflow() {
        for message in [
            "Your input exceeds the context window of this model. Please adjust your input and try again.",
            "prompt too long; exceeded max context length by 120 tokens",
            "the request exceeds the available context size, try increasing it",
        ] {
            assert_eq!(parse(400, &openai(message)), figures(None, None), "{message}");
        }
        let too_large = json!({"type": "error", "error": {"type": "request_too_large", "message": "Request exceeds the maximum size"}}).to_string();
        assert_eq!(parse(413, too_large.as_bytes()), figures(None, None));
        assert_eq!(
            parse(400, b"context_length_exceeded"),
            figures(None, None),
            "a body that is not JSON"
        );
    }

    #[test]
    fn an_overflow_that_was_not_retried_says_what_it_could_not_shrink_below() {
        let c = json!({"outcome": "failed", "tokensBefore": 25000, "tokensAfter": 25000,
                       "contextWindow": 24000, "reason": "the continuation would not be smaller"});
        assert_eq!(
            not_recovered(&c),
            "overflow: could not shrink below 25000 tokens (window 24000): the continuation would not be smaller"
        );
    }

    #[test]
    fn other_errors_are_not_overflows() {
        let invalid = json!({"error": {"message": "Invalid value for 'temperature'", "type": "invalid_request_error", "code": "invalid_value"}}).to_string();
        assert_eq!(parse(400, invalid.as_bytes()), None);
        assert_eq!(
            parse(
                429,
                &anthropic("prompt is too long: 213462 tokens > 200000 maximum")
            ),
            None,
            "only a 400 or 413 is an overflow"
        );
        assert_eq!(
            parse(
                400,
                &anthropic(
                    "ThrottlingException: Too many tokens, rate limit exceeded; please wait"
                )
            ),
            None,
            "throttling that mentions tokens"
        );
        assert_eq!(parse(500, b"maximum context length"), None);
    }
}
