export { SobaClient, type ConnectOptions, type SpawnOptions, type ShowMessage } from './client';
export { SobaError, SobaConnectionError, ErrorCode } from './errors';
export { encodeFrame, FrameReader, FramingError } from './framing';
export * from './protocol';
export * from './providers';
