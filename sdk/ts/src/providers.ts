// The model input from `soba/preflight` in the request shapes of common provider APIs.
// Pure functions: the caller adds model, tools and sampling settings.
//
// Thinking blocks are left out everywhere: providers accept earlier reasoning only with the
// signature or encrypted content they issued, which the plain `thinking` block does not carry.

import type { ContentBlock, ModelMessage, Usage } from './protocol';

/** The block types SOBA reads; any other `type` is a provider block kept whole. */
export type KnownBlockType = 'text' | 'thinking' | 'tool_call' | 'image';

/** A content block of one of SOBA's own types. A plain `b.type === 'text'` cannot narrow, since
 * an opaque provider block's `type` is any string. */
export function isBlock<T extends KnownBlockType>(b: ContentBlock, type: T): b is Extract<ContentBlock, { type: T }> {
  return b.type === type;
}

type ImageBlock = Extract<ContentBlock, { type: 'image' }>;

const textOf = (blocks: ContentBlock[]) =>
  blocks
    .filter((b) => isBlock(b, 'text'))
    .map((b) => b.text)
    .join('\n');

const imagesOf = (blocks: ContentBlock[]) =>
  blocks.filter((b): b is ImageBlock => isBlock(b, 'image') && typeof b.data === 'string' && b.data !== '');

/** `data:` URL (or the URL itself when the block holds one) of an image block. */
export function imageUrl(image: ImageBlock): string {
  const data = image.data ?? '';
  if (/^(https?|data):/.test(data)) return data;
  return `data:${image.media_type ?? 'image/png'};base64,${data}`;
}

// Anthropic Messages ------------------------------------------------------------------------

export type AnthropicContent =
  | { type: 'text'; text: string }
  | { type: 'image'; source: { type: 'base64'; media_type: string; data: string } | { type: 'url'; url: string } }
  | { type: 'tool_use'; id: string; name: string; input: unknown }
  | {
      type: 'tool_result';
      tool_use_id: string;
      content: Array<Extract<AnthropicContent, { type: 'text' | 'image' }>>;
      is_error?: boolean;
    };

export interface AnthropicMessage {
  role: 'user' | 'assistant';
  content: AnthropicContent[];
}

function anthropicImage(b: ImageBlock): Extract<AnthropicContent, { type: 'image' }> {
  const data = b.data ?? '';
  if (/^https?:/.test(data)) return { type: 'image', source: { type: 'url', url: data } };
  return { type: 'image', source: { type: 'base64', media_type: b.media_type ?? 'image/png', data } };
}

/**
 * `system` and `messages` of an Anthropic Messages request. `system` messages join the system
 * prompt; tool results become `tool_result` blocks of the next user turn; consecutive messages
 * of one role are merged, since the API alternates user and assistant.
 */
export function toAnthropic(
  messages: ModelMessage[],
  systemPrompt?: string,
): { system?: string; messages: AnthropicMessage[] } {
  const system: string[] = systemPrompt ? [systemPrompt] : [];
  const out: AnthropicMessage[] = [];
  const push = (role: AnthropicMessage['role'], content: AnthropicContent[]) => {
    if (!content.length) return;
    const last = out[out.length - 1];
    if (last && last.role === role) last.content.push(...content);
    else out.push({ role, content });
  };
  for (const m of messages) {
    switch (m.role) {
      case 'system':
        system.push(textOf(m.content));
        break;
      case 'tool': {
        const content: Array<Extract<AnthropicContent, { type: 'text' | 'image' }>> = [];
        const text = textOf(m.content);
        if (text) content.push({ type: 'text', text });
        content.push(...imagesOf(m.content).map(anthropicImage));
        push('user', [
          {
            type: 'tool_result',
            tool_use_id: m.toolCallId ?? '',
            content,
            ...(m.isError ? { is_error: true } : {}),
          },
        ]);
        break;
      }
      case 'user':
      case 'assistant':
        push(
          m.role,
          m.content.flatMap((b): AnthropicContent[] => {
            if (isBlock(b, 'text')) return b.text ? [{ type: 'text', text: b.text }] : [];
            if (isBlock(b, 'image')) return imagesOf([b]).map(anthropicImage);
            if (isBlock(b, 'tool_call')) return [{ type: 'tool_use', id: b.id, name: b.name, input: b.input }];
            return [];
          }),
        );
        break;
    }
  }
  return { ...(system.length ? { system: system.join('\n\n') } : {}), messages: out };
}

// OpenAI Chat Completions -------------------------------------------------------------------

export type OpenAIChatPart = { type: 'text'; text: string } | { type: 'image_url'; image_url: { url: string } };

export type OpenAIChatMessage =
  | { role: 'system'; content: string }
  | { role: 'user'; content: string | OpenAIChatPart[] }
  | {
      role: 'assistant';
      content: string | null;
      tool_calls?: Array<{ id: string; type: 'function'; function: { name: string; arguments: string } }>;
    }
  | { role: 'tool'; tool_call_id: string; content: string };

/**
 * `messages` of an OpenAI Chat Completions request. Tool results become `tool` messages right
 * after the assistant message that called them; images they hold (which `tool` messages
 * cannot carry) follow in one user message after the run of results.
 */
export function toOpenAIChat(messages: ModelMessage[], systemPrompt?: string): OpenAIChatMessage[] {
  const out: OpenAIChatMessage[] = systemPrompt ? [{ role: 'system', content: systemPrompt }] : [];
  let toolImages: OpenAIChatPart[] = [];
  const flushToolImages = () => {
    if (toolImages.length) out.push({ role: 'user', content: toolImages });
    toolImages = [];
  };
  for (const m of messages) {
    if (m.role !== 'tool') flushToolImages();
    switch (m.role) {
      case 'system':
        out.push({ role: 'system', content: textOf(m.content) });
        break;
      case 'user': {
        const images = imagesOf(m.content);
        out.push({
          role: 'user',
          content: images.length
            ? m.content.flatMap((b): OpenAIChatPart[] =>
                isBlock(b, 'text')
                  ? [{ type: 'text', text: b.text }]
                  : isBlock(b, 'image') && imagesOf([b]).length
                    ? [{ type: 'image_url', image_url: { url: imageUrl(b) } }]
                    : [],
              )
            : textOf(m.content),
        });
        break;
      }
      case 'assistant': {
        const calls = m.content.flatMap((b) =>
          isBlock(b, 'tool_call')
            ? [{ id: b.id, type: 'function' as const, function: { name: b.name, arguments: JSON.stringify(b.input ?? {}) } }]
            : [],
        );
        const text = textOf(m.content);
        out.push({ role: 'assistant', content: text || null, ...(calls.length ? { tool_calls: calls } : {}) });
        break;
      }
      case 'tool': {
        out.push({ role: 'tool', tool_call_id: m.toolCallId ?? '', content: textOf(m.content) });
        const images = imagesOf(m.content);
        if (images.length) {
          toolImages.push({ type: 'text', text: `Images from the result of tool call ${m.toolCallId}:` });
          toolImages.push(...images.map((b) => ({ type: 'image_url' as const, image_url: { url: imageUrl(b) } })));
        }
        break;
      }
    }
  }
  flushToolImages();
  return out;
}

// OpenAI Responses --------------------------------------------------------------------------

type ResponsesUserPart = { type: 'input_text'; text: string } | { type: 'input_image'; image_url: string };

export type OpenAIResponsesItem =
  | { role: 'system'; content: string }
  | { role: 'user'; content: ResponsesUserPart[] }
  | { role: 'assistant'; content: string }
  | { type: 'function_call'; call_id: string; name: string; arguments: string }
  | { type: 'function_call_output'; call_id: string; output: string };

/**
 * `instructions` and `input` of an OpenAI Responses request: tool calls become
 * `function_call` items and their results `function_call_output` items.
 */
export function toOpenAIResponses(
  messages: ModelMessage[],
  systemPrompt?: string,
): { instructions?: string; input: OpenAIResponsesItem[] } {
  const input: OpenAIResponsesItem[] = [];
  for (const m of messages) {
    switch (m.role) {
      case 'system':
        input.push({ role: 'system', content: textOf(m.content) });
        break;
      case 'user':
        input.push({
          role: 'user',
          content: m.content.flatMap((b): ResponsesUserPart[] =>
            isBlock(b, 'text')
              ? [{ type: 'input_text', text: b.text }]
              : isBlock(b, 'image') && imagesOf([b]).length
                ? [{ type: 'input_image', image_url: imageUrl(b) }]
                : [],
          ),
        });
        break;
      case 'assistant': {
        const text = textOf(m.content);
        if (text) input.push({ role: 'assistant', content: text });
        for (const b of m.content) {
          if (isBlock(b, 'tool_call')) {
            input.push({ type: 'function_call', call_id: b.id, name: b.name, arguments: JSON.stringify(b.input ?? {}) });
          }
        }
        break;
      }
      case 'tool': {
        input.push({ type: 'function_call_output', call_id: m.toolCallId ?? '', output: textOf(m.content) });
        const images = imagesOf(m.content);
        if (images.length) {
          input.push({
            role: 'user',
            content: [
              { type: 'input_text', text: `Images from the result of tool call ${m.toolCallId}:` },
              ...images.map((b) => ({ type: 'input_image' as const, image_url: imageUrl(b) })),
            ],
          });
        }
        break;
      }
    }
  }
  return { ...(systemPrompt ? { instructions: systemPrompt } : {}), input };
}

// Replies back into the log ------------------------------------------------------------------

/** A provider reply as a session entry's parts: append `{ type: 'message', role: 'assistant', ...turn }`. */
export interface ModelTurn {
  content: ContentBlock[];
  /** The provider's usage, in SOBA's disjoint parts; absent when the reply had none. */
  usage?: Usage;
}

/** Tool-call arguments as sent: JSON text, parsed; text that is not JSON is kept as is. */
function parseArguments(args: string | undefined): unknown {
  if (!args) return {};
  try {
    return JSON.parse(args);
  } catch {
    return args;
  }
}

export interface AnthropicResponse {
  content: Array<{ type: string; text?: string; thinking?: string; id?: string; name?: string; input?: unknown }>;
  usage?: {
    input_tokens?: number;
    output_tokens?: number;
    cache_read_input_tokens?: number | null;
    cache_creation_input_tokens?: number | null;
  };
}

/** An Anthropic Messages response: `text`, `thinking` and `tool_use` blocks, and its usage. */
export function fromAnthropic(response: AnthropicResponse): ModelTurn {
  const content = response.content.flatMap((b): ContentBlock[] => {
    switch (b.type) {
      case 'text':
        return [{ type: 'text', text: b.text ?? '' }];
      case 'thinking':
        return [{ type: 'thinking', thinking: b.thinking ?? '' }];
      case 'tool_use':
        return [{ type: 'tool_call', id: b.id ?? '', name: b.name ?? '', input: b.input ?? {} }];
      default:
        return [];
    }
  });
  const u = response.usage;
  return {
    content,
    ...(u
      ? {
          usage: {
            input: u.input_tokens ?? 0,
            cacheRead: u.cache_read_input_tokens ?? 0,
            cacheWrite: u.cache_creation_input_tokens ?? 0,
            output: u.output_tokens ?? 0,
          },
        }
      : {}),
  };
}

export interface OpenAIChatResponse {
  choices: Array<{
    message: {
      content?: string | null;
      tool_calls?: Array<{ id: string; function: { name: string; arguments?: string } }> | null;
    };
  }>;
  usage?: { prompt_tokens?: number; completion_tokens?: number; prompt_tokens_details?: { cached_tokens?: number } | null };
}

/** An OpenAI Chat Completions response (its first choice): text, tool calls, and usage. */
export function fromOpenAIChat(response: OpenAIChatResponse): ModelTurn {
  const message = response.choices[0]?.message ?? {};
  const content: ContentBlock[] = [];
  if (message.content) content.push({ type: 'text', text: message.content });
  for (const call of message.tool_calls ?? []) {
    content.push({ type: 'tool_call', id: call.id, name: call.function.name, input: parseArguments(call.function.arguments) });
  }
  const u = response.usage;
  const cached = u?.prompt_tokens_details?.cached_tokens ?? 0;
  return {
    content,
    ...(u
      ? { usage: { input: (u.prompt_tokens ?? 0) - cached, cacheRead: cached, cacheWrite: 0, output: u.completion_tokens ?? 0 } }
      : {}),
  };
}

export interface OpenAIResponsesResponse {
  output: Array<{
    type: string;
    content?: Array<{ type: string; text?: string; refusal?: string }>;
    summary?: Array<{ type: string; text?: string }>;
    call_id?: string;
    name?: string;
    arguments?: string;
  }>;
  usage?: { input_tokens?: number; output_tokens?: number; input_tokens_details?: { cached_tokens?: number } | null };
}

/**
 * An OpenAI Responses response: `message` text (and refusals), `function_call` items as tool
 * calls, reasoning summaries as thinking, and usage.
 */
export function fromOpenAIResponses(response: OpenAIResponsesResponse): ModelTurn {
  const content = response.output.flatMap((item): ContentBlock[] => {
    switch (item.type) {
      case 'message': {
        const text = (item.content ?? []).map((c) => c.text ?? c.refusal ?? '').join('');
        return text ? [{ type: 'text', text }] : [];
      }
      case 'reasoning': {
        const thinking = (item.summary ?? []).map((s) => s.text ?? '').join('\n');
        return thinking ? [{ type: 'thinking', thinking }] : [];
      }
      case 'function_call':
        return [{ type: 'tool_call', id: item.call_id ?? '', name: item.name ?? '', input: parseArguments(item.arguments) }];
      default:
        return [];
    }
  });
  const u = response.usage;
  const cached = u?.input_tokens_details?.cached_tokens ?? 0;
  return {
    content,
    ...(u
      ? { usage: { input: (u.input_tokens ?? 0) - cached, cacheRead: cached, cacheWrite: 0, output: u.output_tokens ?? 0 } }
      : {}),
  };
}
