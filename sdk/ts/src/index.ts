export { SobaClient, type ConnectOptions, type SpawnOptions, type ShowMessage, type Summarize, type RequestHandler } from './client';
export { SobaError, SobaConnectionError, ErrorCode } from './errors';
export { encodeFrame, FrameReader, FramingError } from './framing';
export * from './protocol';
export * from './providers';
