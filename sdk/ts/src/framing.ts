// LSP base-protocol framing: `Content-Length: N\r\n\r\n` followed by N bytes of UTF-8 JSON.

/** One frame's bytes for a JSON-RPC message. */
export function encodeFrame(message: unknown): Buffer {
  const body = Buffer.from(JSON.stringify(message), 'utf8');
  return Buffer.concat([Buffer.from(`Content-Length: ${body.length}\r\n\r\n`, 'ascii'), body]);
}

/** A frame the reader could not make sense of; the stream cannot be followed after it. */
export class FramingError extends Error {}

/**
 * Splits a byte stream into JSON messages. Feed it chunks as they arrive; it returns the
 * messages completed by each chunk.
 */
export class FrameReader {
  private buffer: Buffer = Buffer.alloc(0);

  push(chunk: Buffer): unknown[] {
    this.buffer = this.buffer.length ? Buffer.concat([this.buffer, chunk]) : chunk;
    const messages: unknown[] = [];
    for (;;) {
      const headerEnd = this.buffer.indexOf('\r\n\r\n');
      if (headerEnd < 0) return messages;
      const header = this.buffer.subarray(0, headerEnd).toString('ascii');
      let length: number | undefined;
      for (const line of header.split('\r\n')) {
        const colon = line.indexOf(':');
        if (colon > 0 && line.slice(0, colon).trim().toLowerCase() === 'content-length') {
          length = Number(line.slice(colon + 1).trim());
        }
      }
      if (length === undefined || !Number.isInteger(length) || length < 0) {
        throw new FramingError(`frame header without a valid Content-Length: ${JSON.stringify(header)}`);
      }
      const start = headerEnd + 4;
      if (this.buffer.length < start + length) return messages;
      const body = this.buffer.subarray(start, start + length).toString('utf8');
      this.buffer = this.buffer.subarray(start + length);
      try {
        messages.push(JSON.parse(body));
      } catch (e) {
        throw new FramingError(`frame body is not JSON: ${(e as Error).message}`);
      }
    }
  }
}
