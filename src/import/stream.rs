//! Importing a transcript that is still being written: bytes go in as they arrive, entries come
//! out as soon as no later record can change them.
//!
//! The per-format readers are the same state machines `import_str` drives over a whole file, fed
//! one complete line at a time. A line without its newline yet is kept back until the rest
//! arrives, so a half-written record is never read, and never read twice. At the end,
//! [`StreamImporter::finish`] gives exactly what `import_str` gives for the same bytes.
//!
//! Some records amend an entry made from an earlier record (a Claude Code response repeats its
//! usage on every record and the usage moves to the last one; a Codex `token_count` event puts
//! usage on the assistant entry before it). The readers say how far their entries are settled;
//! [`StreamImporter::take_settled`] hands out only those, and [`StreamImporter::take_all`]
//! hands out the rest when the writer has gone quiet.

use serde_json::Value;

use super::{
    claude_code, codex, count_summary_tokens, pi, read_line, CorruptLine, Format, ImportError,
    ImportOptions, ImportResult, RecordReader,
};
use soba_core::session::entry::{Entry, ModelRef, SessionHeader};

/// Records looked at to recognize the format, as [`super::detect`] does.
const DETECT_RECORDS: usize = 50;

/// An incremental importer of one line-per-record transcript (Claude Code, Codex, pi).
pub struct StreamImporter {
    options: ImportOptions,
    reader: Option<Box<dyn RecordReader>>,
    /// Records read before the format was recognized.
    undetected: Vec<(usize, Value)>,
    /// Bytes of a line whose newline has not arrived yet.
    partial: Vec<u8>,
    /// Lines completed so far (empty ones included), as `str::lines` numbers them.
    lines: usize,
    corrupt: Vec<CorruptLine>,
    /// Entries handed out so far.
    released: usize,
    /// Bytes of complete lines consumed: where a reader that starts over resumes.
    consumed: u64,
    /// The model the records read so far name (with the window a record reported).
    model: Option<ModelRef>,
    /// Each change of [`StreamImporter::model`] not handed out yet, with the number of entries
    /// made before the record that named it: the change applies from that entry on.
    model_changes: Vec<ModelChange>,
}

/// The transcript named another model (or reported another window) from entry `at` on.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelChange {
    /// Index among all the entries the importer makes: the first entry the model applies to.
    pub at: usize,
    pub model: ModelRef,
}

impl StreamImporter {
    /// An importer for `format`, or for the format recognized from the first records.
    /// Whole-document formats (OpenAI-chat trajectories) cannot be followed line by line.
    pub fn new(format: Option<Format>, options: ImportOptions) -> Result<Self, ImportError> {
        let mut importer = StreamImporter {
            options,
            reader: None,
            undetected: Vec::new(),
            partial: Vec::new(),
            lines: 0,
            corrupt: Vec::new(),
            released: 0,
            consumed: 0,
            model: None,
            model_changes: Vec::new(),
        };
        if let Some(f) = format {
            importer.reader = Some(importer.reader_for(f)?);
        }
        Ok(importer)
    }

    fn reader_for(&self, format: Format) -> Result<Box<dyn RecordReader>, ImportError> {
        Ok(match format {
            Format::ClaudeCode => Box::new(claude_code::Reader::new(&self.options)),
            Format::Codex => Box::new(codex::Reader::new(&self.options)),
            Format::Pi => Box::new(pi::Reader::new(&self.options)),
            Format::OpenaiChat => {
                return Err(ImportError::WrongFormat {
                    format,
                    reason: "an OpenAI-chat trajectory is one JSON document, not a record per line; it cannot be followed while written (use `soba import` once it is complete)".into(),
                })
            }
            Format::SweAgent | Format::Aider | Format::CopilotCli => {
                return Err(ImportError::WrongFormat {
                    format,
                    reason: format!("a {} file is imported whole, not followed while it is written; only Claude Code, Codex and pi transcripts can be followed (use `soba import` once the run is complete)", format.as_str()),
                })
            }
        })
    }

    /// The format, once known.
    pub fn format(&self) -> Option<Format> {
        self.reader.as_ref().map(|r| r.builder().report.format)
    }

    /// Bytes of complete lines read so far.
    pub fn consumed(&self) -> u64 {
        self.consumed
    }

    /// Whether a line is waiting for the rest of its bytes.
    pub fn has_partial_line(&self) -> bool {
        !self.partial.is_empty()
    }

    /// Read the next bytes of the transcript. Complete lines are imported; an incomplete last
    /// line waits for the next call.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<(), ImportError> {
        let mut rest = bytes;
        while let Some(nl) = rest.iter().position(|b| *b == b'\n') {
            let (head, tail) = rest.split_at(nl);
            rest = &tail[1..];
            let line = if self.partial.is_empty() {
                head.to_vec()
            } else {
                let mut l = std::mem::take(&mut self.partial);
                l.extend_from_slice(head);
                l
            };
            self.consumed += line.len() as u64 + 1;
            self.line(&line)?;
        }
        self.partial.extend_from_slice(rest);
        Ok(())
    }

    fn line(&mut self, bytes: &[u8]) -> Result<(), ImportError> {
        self.lines += 1;
        let line_no = self.lines;
        // Bytes that are not UTF-8 are replaced and the line kept, as `soba import` does.
        let lossy;
        let mut not_utf8 = None;
        let mut text = match std::str::from_utf8(bytes) {
            Ok(t) => t,
            Err(e) => {
                not_utf8 = Some(CorruptLine {
                    line: line_no,
                    reason: super::not_utf8_reason(&e),
                });
                lossy = String::from_utf8_lossy(bytes);
                &lossy
            }
        };
        if line_no == 1 {
            // A byte-order mark, as `import_str` ignores it.
            text = text.strip_prefix('\u{feff}').unwrap_or(text);
        }
        let mut records = Vec::new();
        read_line(line_no, text, &mut records, &mut self.corrupt);
        if let Some(not_utf8) = not_utf8 {
            super::note_not_utf8(&mut self.corrupt, not_utf8);
        }
        for (line, record) in records {
            self.record(line, record)?;
        }
        Ok(())
    }

    fn record(&mut self, line: usize, record: Value) -> Result<(), ImportError> {
        if self.reader.is_some() {
            self.read_record(line, &record);
            return Ok(());
        }
        let format = if pi::looks_like_header(&record) {
            Some(Format::Pi)
        } else if codex::looks_like_record(&record) {
            Some(Format::Codex)
        } else if claude_code::looks_like_record(&record) {
            Some(Format::ClaudeCode)
        } else {
            None
        };
        self.undetected.push((line, record));
        match format {
            Some(f) => {
                self.reader = Some(self.reader_for(f)?);
                for (line, r) in std::mem::take(&mut self.undetected) {
                    self.read_record(line, &r);
                }
                Ok(())
            }
            None if self.undetected.len() >= DETECT_RECORDS => Err(ImportError::UnknownFormat {
                reason: "no record has the shape of a known transcript format".into(),
            }),
            None => Ok(()),
        }
    }

    /// Give one record to the reader, noting a change of the model it names.
    fn read_record(&mut self, line: usize, record: &Value) {
        let Some(reader) = self.reader.as_mut() else {
            return;
        };
        let before = reader.builder().entries().len();
        reader.record(line, record);
        let Some(model) = reader.header().model() else {
            return;
        };
        if self.model.as_ref() != Some(&model) {
            self.model = Some(model.clone());
            self.model_changes.push(ModelChange { at: before, model });
        }
    }

    /// Entries handed out so far.
    pub fn released(&self) -> usize {
        self.released
    }

    /// The model changes that apply to entries handed out so far or to the next one, oldest
    /// first; each is handed out once.
    pub fn take_model_changes(&mut self) -> Vec<ModelChange> {
        let due = self
            .model_changes
            .iter()
            .take_while(|c| c.at <= self.released)
            .count();
        self.model_changes.drain(..due).collect()
    }

    /// The session header as far as the records read so far tell (`None` before the format
    /// is known).
    pub fn header(&self) -> Option<SessionHeader> {
        self.reader.as_ref().map(|r| r.header().to_header())
    }

    /// Entries not handed out yet that no later record can change.
    pub fn take_settled(&mut self) -> Vec<Entry> {
        let settled = self.reader.as_ref().map_or(0, |r| r.settled_len());
        self.take_until(settled)
    }

    /// Every entry not handed out yet, settled or not: for when the writer has gone quiet.
    pub fn take_all(&mut self) -> Vec<Entry> {
        let all = self
            .reader
            .as_ref()
            .map_or(0, |r| r.builder().entries().len());
        self.take_until(all)
    }

    fn take_until(&mut self, end: usize) -> Vec<Entry> {
        let Some(reader) = self.reader.as_ref() else {
            return Vec::new();
        };
        if end <= self.released {
            return Vec::new();
        }
        let mut out = reader.builder().entries()[self.released..end].to_vec();
        self.released = end;
        let tokenizer = reader
            .header()
            .model()
            .and_then(|m| m.tokenizer)
            .unwrap_or_default();
        count_summary_tokens(&mut out, tokenizer);
        out
    }

    /// Read what is left (a last line without its newline counts, as in a whole file) and
    /// give what `import_str` gives for everything fed.
    pub fn finish(mut self) -> Result<ImportResult, ImportError> {
        if !self.partial.is_empty() {
            let last = std::mem::take(&mut self.partial);
            self.line(&last)?;
        }
        let Some(reader) = self.reader.take() else {
            let reason = if self.undetected.is_empty() && self.lines == 0 {
                "the file is empty"
            } else if self.undetected.is_empty() {
                "no line is a JSON object"
            } else {
                "no record has the shape of a known transcript format"
            };
            return Err(ImportError::UnknownFormat {
                reason: reason.into(),
            });
        };
        let mut result = reader.finish();
        result.report.corrupt_lines = self.corrupt;
        if !result.entries.iter().any(Entry::is_model_visible) {
            return Err(ImportError::Empty {
                format: result.report.format,
            });
        }
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use serde_json::json;

    fn claude_lines() -> String {
        jsonl(&[
            json!({"type":"user","uuid":"u1","parentUuid":null,"sessionId":"s1","cwd":"/w","timestamp":"t1",
                   "message":{"role":"user","content":"fix the bug"}}),
            json!({"type":"assistant","uuid":"a1","parentUuid":"u1","timestamp":"t2",
                   "message":{"id":"m1","model":"claude-sonnet-4-5","role":"assistant",
                              "content":[{"type":"text","text":"looking"}],
                              "usage":{"input_tokens":10,"output_tokens":1}}}),
            json!({"type":"assistant","uuid":"a2","parentUuid":"a1","timestamp":"t3",
                   "message":{"id":"m1","model":"claude-sonnet-4-5","role":"assistant",
                              "content":[{"type":"tool_use","id":"c1","name":"Read","input":{"file_path":"a.rs"}}],
                              "usage":{"input_tokens":10,"output_tokens":7}}}),
            json!({"type":"user","uuid":"u2","parentUuid":"a2","timestamp":"t4",
                   "message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"c1","content":"fn main(){}"}]}}),
        ])
    }

    #[test]
    fn a_half_written_last_line_waits_for_its_newline() {
        let text = claude_lines();
        let cut = text.len() - 20;
        let mut s = StreamImporter::new(None, options()).unwrap();
        s.feed(&text.as_bytes()[..cut]).unwrap();
        assert!(s.has_partial_line());
        let before: Vec<_> = s.take_all();
        assert!(
            before.iter().all(|e| e.source_id.as_deref() != Some("u2")),
            "the half-written record was read"
        );
        s.feed(&text.as_bytes()[cut..]).unwrap();
        assert!(!s.has_partial_line());
        let after = s.take_all();
        assert_eq!(after.len(), 1);
        assert_eq!(after[0].source_id.as_deref(), Some("u2"));
        assert_eq!(s.consumed(), text.len() as u64);
    }

    #[test]
    fn a_response_still_streaming_is_held_until_its_next_record() {
        let text = claude_lines();
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        let mut s = StreamImporter::new(Some(Format::ClaudeCode), options()).unwrap();
        s.feed(lines[0].as_bytes()).unwrap();
        s.feed(lines[1].as_bytes()).unwrap();
        // a1's usage may still move to a later record of response m1.
        let first = s.take_settled();
        assert_eq!(first.len(), 1, "{first:?}");
        s.feed(lines[2].as_bytes()).unwrap();
        s.feed(lines[3].as_bytes()).unwrap();
        // a1 gave its usage to a2; a2 may still give it to a later record of m1 (after the tool
        // result too): it waits for the writer to go quiet.
        let mid = s.take_settled();
        let mid_sources: Vec<_> = mid.iter().map(|e| e.source_id.clone().unwrap()).collect();
        assert_eq!(mid_sources, ["a1"]);
        let mut rest = mid;
        rest.extend(s.take_all());
        let with_usage: Vec<_> = rest
            .iter()
            .filter(|e| e.as_message().is_some_and(|m| m.usage.is_some()))
            .map(|e| e.source_id.clone().unwrap())
            .collect();
        assert_eq!(with_usage, ["a2"], "usage is kept once, on the last record");
        let whole = crate::import::transcript::import_str(&text, None, &options()).unwrap();
        let mut streamed = first;
        streamed.extend(rest);
        assert_eq!(streamed, whole.entries);
    }

    #[test]
    fn codex_usage_arrives_before_the_assistant_entry_is_released() {
        let meta = json!({"timestamp":"t","type":"session_meta","payload":{"id":"x","cwd":"/w"}});
        let reply = json!({"timestamp":"t","type":"response_item","payload":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"done"}]}});
        let usage = json!({"timestamp":"t","type":"event_msg","payload":{"type":"token_count","info":{"last_token_usage":{"input_tokens":100,"cached_input_tokens":0,"output_tokens":5}}}});
        let mut s = StreamImporter::new(None, options()).unwrap();
        s.feed(jsonl(&[meta, reply]).as_bytes()).unwrap();
        assert!(s.take_settled().is_empty());
        s.feed(jsonl(&[usage]).as_bytes()).unwrap();
        let out = s.take_settled();
        assert_eq!(out.len(), 1);
        assert!(out[0].as_message().unwrap().usage.is_some());
    }

    #[test]
    fn a_whole_document_format_cannot_be_followed() {
        let err = StreamImporter::new(Some(Format::OpenaiChat), options())
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("soba import"), "{err}");
    }

    #[test]
    fn lines_of_no_known_format_are_refused_after_the_detection_window() {
        let mut s = StreamImporter::new(None, options()).unwrap();
        let text = "{\"x\":1}\n".repeat(DETECT_RECORDS);
        let err = s.feed(text.as_bytes()).unwrap_err().to_string();
        assert!(err.contains("claude-code, codex, pi"), "{err}");
    }
}
