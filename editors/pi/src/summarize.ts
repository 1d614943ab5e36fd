// SOBA's capsules written by pi's own model: the daemon sends its summarization prompts
// (`soba/summarize`, docs/protocol.md) while pi's compaction waits for SOBA, and they run on the
// model pi is using, with the key and headers pi resolved for it. The key stays in pi's process;
// the daemon gets only the reply text.
import { completeSimple } from '@mariozechner/pi-ai';
import type { ExtensionContext } from '@mariozechner/pi-coding-agent';
import type { SummarizeParams, SummarizeResult } from './client.js';

/**
 * The pi compaction in progress: the model pi uses, the registry that resolves its key, and the
 * compaction's abort signal. Held as objects, not through pi's extension context, which pi
 * invalidates when it disposes the session (at the end of a `pi -p` run) while the compaction
 * may still be waiting for SOBA.
 */
export interface Compacting {
  model: ExtensionContext['model'];
  modelRegistry: ExtensionContext['modelRegistry'];
  signal: AbortSignal;
}

/** Why pi's model gave no summary; its message goes back to the daemon. */
export class ModelFailed extends Error {}

/**
 * Run one summarization prompt on pi's current model. Fails (and SOBA falls back to its local
 * capsule) when no compaction is running, pi has no model or no key for it, or the model fails.
 */
export async function summarizeWithPi(
  compacting: Compacting | undefined,
  params: SummarizeParams,
  signal: AbortSignal,
): Promise<SummarizeResult> {
  if (!compacting) throw new ModelFailed('pi is not compacting now, so it has no model request to serve');
  const model = compacting.model;
  if (!model) throw new ModelFailed('pi has no model selected');
  const auth = await compacting.modelRegistry.getApiKeyAndHeaders(model);
  if (!auth.ok) throw new ModelFailed(auth.error);
  const response = await completeSimple(
    model,
    {
      systemPrompt: params.system,
      messages: [{ role: 'user', content: [{ type: 'text', text: params.user }], timestamp: Date.now() }],
    },
    {
      maxTokens: params.maxOutputTokens,
      apiKey: auth.apiKey,
      headers: auth.headers,
      signal: AbortSignal.any([signal, compacting.signal]),
      // SOBA's compaction has its own deadline and fallback: a failure is worth more than a
      // retry that outlives it.
      maxRetries: 0,
    },
  );
  if (response.stopReason === 'error' || response.stopReason === 'aborted') {
    throw new ModelFailed(response.errorMessage || `the model's request ended: ${response.stopReason}`);
  }
  const text = response.content
    .filter((c): c is { type: 'text'; text: string } => c.type === 'text')
    .map((c) => c.text)
    .join('\n');
  return { text, hitOutputLimit: response.stopReason === 'length' };
}
