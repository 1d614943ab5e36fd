// Folders the tests read from. tsc compiles them to out/editors/vscode/test/: its rootDir is the
// repository, because src/protocol.ts takes the protocol's types from sdk/ts/src/.
import * as path from 'node:path';

/** editors/vscode: the extension's package.json, src/ and dist/. */
export const EXTENSION_ROOT = path.resolve(__dirname, '..', '..', '..', '..');
/** The SOBA repository. */
export const REPO_ROOT = path.resolve(EXTENSION_ROOT, '..', '..');
