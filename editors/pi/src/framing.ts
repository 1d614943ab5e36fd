// The LSP base protocol framing `soba serve` speaks: `Content-Length: N\r\n\r\n` + N bytes of
// UTF-8 JSON. Pure: bytes in, messages out.

export function encode(message: object): Buffer {
  const body = Buffer.from(JSON.stringify(message), 'utf8');
  return Buffer.concat([Buffer.from(`Content-Length: ${body.length}\r\n\r\n`, 'ascii'), body]);
}

/** Splits a byte stream into JSON messages; a frame it cannot read is reported and skipped. */
export class FrameReader {
  private buffer: Buffer = Buffer.alloc(0);

  constructor(
    private readonly onMessage: (message: unknown) => void,
    private readonly onBadFrame: (why: string) => void,
  ) {}

  push(chunk: Buffer): void {
    this.buffer = this.buffer.length === 0 ? chunk : Buffer.concat([this.buffer, chunk]);
    for (;;) {
      const end = this.buffer.indexOf('\r\n\r\n');
      if (end < 0) return;
      const header = this.buffer.subarray(0, end).toString('ascii');
      const length = /(?:^|\r\n)content-length:\s*(\d+)/i.exec(header);
      if (!length) {
        this.onBadFrame(`a frame without Content-Length: ${JSON.stringify(header.slice(0, 80))}`);
        this.buffer = this.buffer.subarray(end + 4);
        continue;
      }
      const start = end + 4;
      const size = Number(length[1]);
      if (this.buffer.length < start + size) return;
      const body = this.buffer.subarray(start, start + size).toString('utf8');
      this.buffer = this.buffer.subarray(start + size);
      try {
        this.onMessage(JSON.parse(body));
      } catch {
        this.onBadFrame(`a frame that is not JSON: ${JSON.stringify(body.slice(0, 80))}`);
      }
    }
  }
}
