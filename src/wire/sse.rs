//! A small incremental parser for Server-Sent Events (the `text/event-stream` format both
//! providers stream in). Pure: bytes in, complete events out; it never blocks and never
//! allocates more than the unfinished tail of the stream.
//!
//! Follows the WHATWG rules that matter here: lines end in LF, CRLF or CR; a blank line
//! dispatches the event; `:` starts a comment; `data` lines are joined with `\n`; one space
//! after the colon is dropped; an event without data is not dispatched.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field; `None` means the default type `message`.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes after the last complete line.
    pending: Vec<u8>,
    /// A CR ended the previous chunk; an LF that starts the next one belongs to it.
    after_cr: bool,
    event: Option<String>,
    data: Option<String>,
}

impl SseParser {
    pub fn new() -> Self {
        SseParser::default()
    }

    /// Feed the next chunk of the stream; returns the events it completes, in order.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut events = Vec::new();
        let mut bytes = chunk;
        if self.after_cr {
            self.after_cr = false;
            if let Some(rest) = bytes.strip_prefix(b"\n") {
                bytes = rest;
            }
        }
        let mut start = 0;
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'\n' | b'\r' => {
                    self.pending.extend_from_slice(&bytes[start..i]);
                    let line = std::mem::take(&mut self.pending);
                    if let Some(event) = self.line(&line) {
                        events.push(event);
                    }
                    if bytes[i] == b'\r' {
                        if i + 1 == bytes.len() {
                            self.after_cr = true;
                        } else if bytes[i + 1] == b'\n' {
                            i += 1;
                        }
                    }
                    start = i + 1;
                }
                _ => {}
            }
            i += 1;
        }
        self.pending.extend_from_slice(&bytes[start..]);
        events
    }

    /// True when the stream stopped in the middle of an event (bytes or fields not yet
    /// dispatched by a blank line): a truncated stream.
    pub fn has_partial_event(&self) -> bool {
        !self.pending.is_empty() || self.data.is_some() || self.event.is_some()
    }

    fn line(&mut self, line: &[u8]) -> Option<SseEvent> {
        if line.is_empty() {
            let event = self.event.take();
            return self.data.take().map(|data| SseEvent { event, data });
        }
        let line = String::from_utf8_lossy(line);
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line.as_ref(), ""),
        };
        match field {
            "event" => self.event = Some(value.to_string()),
            "data" => match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => self.data = Some(value.to_string()),
            },
            // `id` and `retry` matter for reconnecting clients only; unknown fields are ignored.
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        chunks.iter().flat_map(|c| p.feed(c)).collect()
    }

    fn ev(event: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            event: event.map(str::to_string),
            data: data.to_string(),
        }
    }

    #[test]
    fn single_event_with_type() {
        let got = parse_all(&[b"event: message_start\ndata: {\"a\":1}\n\n"]);
        assert_eq!(got, vec![ev(Some("message_start"), "{\"a\":1}")]);
    }

    #[test]
    fn multi_line_data_is_joined_with_newlines() {
        let got = parse_all(&[b"data: one\ndata: two\ndata:three\n\n"]);
        assert_eq!(got, vec![ev(None, "one\ntwo\nthree")]);
    }

    #[test]
    fn comments_and_unknown_fields_are_ignored() {
        let got = parse_all(&[
            b": keep-alive\n\nid: 7\nretry: 10\ndata: x\n\n: OPENROUTER PROCESSING\n\n",
        ]);
        assert_eq!(got, vec![ev(None, "x")]);
    }

    #[test]
    fn crlf_and_cr_line_endings() {
        let got = parse_all(&[b"data: a\r\n\r\ndata: b\r\rdata: c\n\n"]);
        assert_eq!(got, vec![ev(None, "a"), ev(None, "b"), ev(None, "c")]);
    }

    #[test]
    fn events_split_across_chunks_at_every_byte() {
        let stream: &[u8] = b"event: content_block_delta\r\ndata: {\"t\":\"h\xc3\xa9\"}\r\n\r\ndata: [DONE]\r\n\r\n";
        let whole = parse_all(&[stream]);
        assert_eq!(
            whole,
            vec![
                ev(Some("content_block_delta"), "{\"t\":\"hé\"}"),
                ev(None, "[DONE]")
            ]
        );
        for cut in 0..stream.len() {
            let (a, b) = stream.split_at(cut);
            assert_eq!(parse_all(&[a, b]), whole, "split at {cut}");
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(parse_all(&bytes), whole);
    }

    #[test]
    fn a_field_without_colon_and_a_space_free_value() {
        let got = parse_all(&[b"data\ndata:x\n\n"]);
        assert_eq!(got, vec![ev(None, "\nx")]);
    }

    #[test]
    fn event_without_data_is_not_dispatched() {
        assert!(parse_all(&[b"event: ping\n\n"]).is_empty());
    }

    #[test]
    fn truncated_stream_is_visible() {
        let mut p = SseParser::new();
        assert!(p.feed(b"data: {\"partial\":").is_empty());
        assert!(p.has_partial_event());
        let mut p = SseParser::new();
        p.feed(b"data: x\n");
        assert!(
            p.has_partial_event(),
            "data line without the dispatching blank line"
        );
        let mut p = SseParser::new();
        p.feed(b"data: x\n\n");
        assert!(!p.has_partial_event());
    }
}
