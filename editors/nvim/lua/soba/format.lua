--- Pure text for the statusline, notifications and the flight-record buffer.
--- No editor state here: every function maps protocol values to strings, so specs test it alone.
--- Keep in step with editors/vscode/src/status.ts: both editors must say the same thing.
local M = {}

local function trim_zero(fixed)
  return (fixed:gsub('%.0$', ''))
end

--- `950`, `1.2k`, `48.8k`, `128k`, `1.2M`.
function M.tokens(n)
  n = math.max(0, math.floor((tonumber(n) or 0) + 0.5))
  if n < 1000 then
    return tostring(n)
  elseif n < 999950 then
    return trim_zero(string.format('%.1f', n / 1000)) .. 'k'
  end
  return trim_zero(string.format('%.1f', n / 1000000)) .. 'M'
end

local function present(v)
  return v ~= nil and v ~= vim.NIL
end

--- The followed agent as it sees itself (its model, its own threshold, its own last
--- compaction), for a session SOBA only follows; nil otherwise.
function M.followed_agent(report)
  local control = report and report.control
  if type(control) ~= 'table' or control.compactedBy ~= 'agent' then
    return nil
  end
  return type(report.followed) == 'table' and report.followed or nil
end

--- Before a followed agent's first response names its model: no limit is the agent's yet.
function M.model_not_known_yet(report)
  local agent = M.followed_agent(report)
  return agent ~= nil and agent.modelSource == 'unknown'
end

--- The limit the statusline measures against: where a followed agent compacts itself, else
--- SOBA's hard limit.
function M.bar_limit(report)
  local agent = M.followed_agent(report)
  if agent and present(agent.compactsAt) then
    return agent.compactsAt
  end
  return report.hardLimit
end

--- `31.2k / 48.8k`: effective tokens against the limit that matters (SOBA's hard limit, or
--- where a followed agent compacts itself); `30 · model not known yet` before a followed agent
--- has named its model, never another model's limits.
function M.status_text(report)
  if M.model_not_known_yet(report) then
    return M.tokens(report.effectiveTokens) .. ' · model not known yet'
  end
  return M.tokens(report.effectiveTokens) .. ' / ' .. M.tokens(M.bar_limit(report))
end

--- 'normal' up to the soft limit, 'warning' past it, 'error' at the hard limit. A followed agent
--- is healthy under its own threshold and compacts itself at it: 'warning' there, never 'error'
--- for SOBA's limit, and 'normal' while its model is not known.
function M.severity(report)
  local agent = M.followed_agent(report)
  if agent then
    if present(agent.compactsAt) and report.effectiveTokens >= agent.compactsAt then
      return 'warning'
    end
    return 'normal'
  end
  if report.effectiveTokens >= report.hardLimit then
    return 'error'
  elseif report.effectiveTokens > report.softLimit then
    return 'warning'
  end
  return 'normal'
end

M.highlight = { normal = 'SobaBudgetOk', warning = 'SobaBudgetWarning', error = 'SobaBudgetError' }

function M.source_label(source)
  return source == 'provider_usage' and 'provider usage' or 'estimated'
end

local calibration_from = {
  catalog = 'catalog factor',
  config = 'model.countFactor',
  session = 'learned from this session',
  provisional = 'catalog factor + margin until a usage report teaches one',
}

--- The tokenizer the budget counts with, and the factor on it where there is one.
function M.counted_with(report)
  local c = report.calibration
  if type(c) ~= 'table' or c.source == 'exact' or (c.factor or 1) <= 1 then
    return report.tokenizer
  end
  return string.format('%s × %.2f, %s', c.tokenizer, c.factor, calibration_from[c.source] or c.source)
end

--- What the measurement source means for the figure shown, in one sentence.
function M.source_explanation(report)
  local c = report.calibration
  local tokenizer
  if type(c) ~= 'table' or c.source == 'exact' then
    tokenizer = report.tokenizer .. ", the model's own tokenizer"
  else
    tokenizer = string.format("%s, not the model's own tokenizer (scaled × %.2f)", c.tokenizer, c.factor)
  end
  if report.source == 'provider_usage' then
    return 'Provider usage: the input tokens the provider reported for the last response, plus what came after it counted with '
      .. tokenizer
  end
  return 'Estimated: no usage report from the provider since the latest capsule, so SOBA counted the context with ' .. tokenizer
end

--- The part of the total neither a counted part nor `notInLog` holds, so that the parts add up to
--- the total: with an estimate the factor that scales SOBA's count for a tokenizer that is not the
--- model's own; with provider usage from a daemon that sends no `notInLog`, what the provider
--- counted that is not in the log. `notInLog` (what the provider counted beyond the log, or the
--- allowance an estimate keeps for it) is a part of its own, never counted twice. Every other
--- numeric part the daemon sends counts, whatever its name. Returns label, tokens; nil when
--- nothing is left.
function M.uncounted_part(total, breakdown, source)
  local counted = 0
  for key, value in pairs(breakdown or {}) do
    if type(value) == 'number' then
      counted = counted + value
    end
  end
  local rest = math.floor(total - counted + 0.5)
  if rest <= 0 then
    return nil
  end
  return source == 'provider_usage' and 'not in the log' or 'tokenizer scale', rest
end

--- The parts beyond the log's counted ones, in order, as { label, tokens }: what is not in the
--- log (the provider's count beyond it, or the unseen-context allowance), then the rest.
function M.extra_parts(total, breakdown, source)
  local parts = {}
  local b = breakdown or {}
  if type(b.notInLog) == 'number' and b.notInLog > 0 then
    parts[#parts + 1] = { 'not in the log', b.notInLog }
  end
  local label, rest = M.uncounted_part(total, b, source)
  if rest then
    parts[#parts + 1] = { label, rest }
  end
  return parts
end

function M.reclaimed_percent(before, after)
  if not before or before <= 0 then
    return 0
  end
  return math.floor((before - after) / before * 100 + 0.5)
end

local agent_names = { ['claude-code'] = 'Claude Code', codex = 'Codex', pi = 'pi' }

--- `Claude Code`, from the daemon's `claude-code`.
function M.agent_name(agent)
  return agent_names[agent] or agent or 'the agent'
end

--- `Claude Code's own (auto): 150k → summary 2.2k, <ts>`: the agent's compaction of itself.
function M.agent_compaction(name, c)
  local before = present(c.tokensBefore) and (M.tokens(c.tokensBefore) .. ' → ') or ''
  local summary = present(c.summaryTokens) and ('summary ' .. M.tokens(c.summaryTokens)) or 'summary'
  local trigger = present(c.trigger) and (' (' .. c.trigger .. ')') or ''
  return string.format("%s's own%s: %s%s, %s", name, trigger, before, summary, c.ts)
end

--- The session's last compaction, whoever made it: SOBA's capsule, or for a followed agent its
--- own compaction when that came later (or SOBA wrote none).
function M.last_compaction_of(report)
  local agent = M.followed_agent(report)
  local own = agent and present(agent.lastCompaction) and agent.lastCompaction or nil
  local soba = present(report.lastCompaction) and report.lastCompaction or nil
  if own and (not soba or own.ts >= soba.ts) then
    return M.agent_compaction(M.agent_name(report.control.agent), own)
  end
  return M.last_compaction(soba)
end

function M.last_compaction(last)
  if last == nil or last == vim.NIL then
    return 'none yet'
  end
  return string.format(
    '%s: %s → %s (−%d%%), %s, %s, %s',
    last.trigger,
    M.tokens(last.tokensBefore),
    M.tokens(last.tokensAfter),
    M.reclaimed_percent(last.tokensBefore, last.tokensAfter),
    last.checkpointId,
    last.quality,
    last.ts
  )
end

--- The statusline item: `31.2k / 48.8k`, with the compaction percent while one runs.
function M.statusline(report, compacting_percent)
  local text = M.status_text(report)
  if compacting_percent then
    return text .. string.format(' ⟳ %d%%', compacting_percent)
  elseif report.compacting then
    return text .. ' ⟳'
  elseif report.compactQueued then
    -- An explicit :Soba compact waits for the agent's model call to end.
    return text .. ' ⏳'
  end
  return text
end

--- Whether the agent compacts the session itself and SOBA only follows it: SOBA's compact,
--- capsule load and rewind are then previews.
function M.followed(report)
  local control = report and report.control
  return type(control) == 'table' and control.compactedBy == 'agent'
end

--- A checkpoint in a picker: its title or what made it, then its id, quality and size.
function M.checkpoint_item(c)
  local title = type(c.title) == 'string' and c.title ~= '' and c.title or nil
  local made = c.origin == 'loaded' and 'loaded capsule'
    or c.trigger == 'handoff' and 'capsule'
    or ('compaction (' .. (c.trigger == 'user' and '/compact' or tostring(c.trigger):gsub('_', ' ')) .. ')')
  -- The capsule's own size, as the notice of its creation and `:Soba capsule list` give it.
  return string.format(
    '%s  %s · %s · %s tokens',
    title or made,
    c.checkpointId,
    c.quality,
    M.tokens(c.tokens and c.tokens.capsule)
  )
end

--- `:Soba budget`: the statusline's tooltip, as lines.
function M.budget_lines(report)
  local pct = report.hardLimit > 0 and math.floor(report.effectiveTokens / report.hardLimit * 100 + 0.5) or 0
  local b = report.breakdown or {}
  local extra = ''
  for _, part in ipairs(M.extra_parts(report.effectiveTokens, b, report.source)) do
    extra = extra .. string.format(', %s %s', part[1], M.tokens(part[2]))
  end
  local agent = M.followed_agent(report)
  local first, limits, model
  if agent then
    -- The agent's own threshold, SOBA's hard limit named as SOBA's; no limit before its model is known.
    local at = present(agent.compactsAt) and agent.compactsAt or nil
    first = M.model_not_known_yet(report)
        and string.format('Context budget: %s tokens, model not known yet', M.tokens(report.effectiveTokens))
      or string.format(
        'Context budget: %s tokens%s',
        M.status_text(report),
        at
            and string.format(
              ' (%d%% of where %s compacts)',
              math.floor(report.effectiveTokens / at * 100 + 0.5),
              M.agent_name(report.control.agent)
            )
          or ''
      )
    limits = agent.text
    model = agent.modelSource == 'unknown' and 'model not known yet' or report.model
  else
    first = string.format('Context budget: %s tokens (%d%% of the hard limit)', M.status_text(report), pct)
    limits = M.followed(report) and string.format('Soft limit: %s', M.tokens(report.softLimit))
      or string.format('Soft limit: %s (auto-compaction starts past it)', M.tokens(report.softLimit))
    model = report.model
  end
  local lines = {
    first,
    limits,
    string.format('Measured: %s (%s, %s)', M.source_label(report.source), model, M.counted_with(report)),
    M.source_explanation(report),
    string.format(
      'Breakdown: system %s, tools %s, capsule %s, retained tail %s, new entries %s',
      M.tokens(b.system),
      M.tokens(b.tools),
      M.tokens(b.capsule),
      M.tokens(b.retainedTail),
      M.tokens(b.newEntries)
    ) .. extra,
    -- For a followed agent, who compacts; SOBA's auto-compact never runs there.
    M.followed(report) and report.control.note or ('Auto-compact: ' .. (report.autoCompact and 'on' or 'off')),
    'Last compaction: ' .. M.last_compaction_of(report),
  }
  for _, problem in ipairs(agent and type(agent.problems) == 'table' and agent.problems or {}) do
    lines[#lines + 1] = problem
  end
  -- Where the allowance for the agent's unseen system prompt and tools comes from.
  if type(b.unseenText) == 'string' then
    table.insert(lines, 6, 'Allowance: ' .. b.unseenText)
  end
  return lines
end

--- Why a compaction fell back to the local capsule, in a few words, from the daemon's reason
--- (`the summarization model did not finish within 30000 ms; the local capsule was used`). The
--- whole reason is in `:Soba flight`. Keep in step with fallbackWhy in status.ts.
function M.fallback_why(reason)
  reason = type(reason) == 'string' and reason or ''
  local status = reason:match('answered HTTP (%d+)')
  if status then
    return 'model answered HTTP ' .. status
  end
  local known = {
    { 'did not finish within', 'model timed out' },
    { 'could not talk to the summarization model', 'model unreachable' },
    { 'stream ended before the reply was complete', 'model reply cut off' },
    { 'invalid reply from the summarization model', 'invalid model reply' },
    { 'reported an error', 'model reported an error' },
    { 'paused after %d+ consecutive failures', 'model paused after repeated failures' },
  }
  for _, k in ipairs(known) do
    if reason:find(k[1]) then
      return k[2]
    end
  end
  -- Another reason: its first clause, short enough for one line.
  local first = vim.trim(reason:match('^[^;]*'))
  if vim.fn.strchars(first) > 48 then
    return vim.trim(vim.fn.strcharpart(first, 0, 47)) .. '…'
  end
  return first ~= '' and first or 'model failed'
end

--- `model`, `local`, or for a fallback `degraded (model timed out)`.
function M.quality_text(result)
  local quality = result.quality ~= vim.NIL and result.quality or nil
  if result.fallback == true or quality == 'degraded' then
    return 'degraded (' .. M.fallback_why(result.reason) .. ')'
  end
  return quality or 'unknown quality'
end

--- The one line a finished compaction shows: trigger, before → after, quality, checkpoint; when
--- it fell back to the local capsule, `degraded` and why in a few words right after the trigger.
function M.completion_line(result)
  if result.trigger == 'handoff' then
    -- A created capsule records state and compacts nothing.
    if result.outcome == 'completed' then
      return string.format(
        'capsule created: %s (%s); the context is unchanged at %s tokens',
        result.checkpointId ~= vim.NIL and result.checkpointId or 'no checkpoint',
        result.quality ~= vim.NIL and result.quality or 'unknown quality',
        M.tokens(result.tokensBefore)
      )
    end
    return string.format('capsule creation %s: %s', result.outcome, result.reason)
  end
  if result.outcome == 'cancelled' then
    -- Stopped on purpose (`:Soba cancel`, an editor's Cancel): not a failure.
    return string.format('%s compact cancelled: no capsule written; the context is unchanged', result.trigger)
  end
  if result.outcome ~= 'completed' then
    return string.format('%s compact %s: %s', result.trigger, result.outcome, result.reason)
  end
  local checkpoint = result.checkpointId ~= vim.NIL and result.checkpointId or 'no checkpoint'
  local reclaimed = string.format(
    '%s → %s tokens (−%d%%)',
    M.tokens(result.tokensBefore),
    M.tokens(result.tokensAfter),
    math.floor((result.reclaimedPercent or 0) + 0.5)
  )
  if result.fallback == true or result.quality == 'degraded' then
    -- Why first: a line fit to the command line still says it.
    return string.format('%s compact, %s: %s, %s', result.trigger, M.quality_text(result), reclaimed, checkpoint)
  end
  return string.format('%s compact: %s, %s, %s', result.trigger, reclaimed, M.quality_text(result), checkpoint)
end

--- The daemon's warning after a compaction that fell back: the result line already says why.
function M.fallback_warning(result)
  return 'The compaction used the local capsule: ' .. tostring(result.reason)
end

--- `text` on one line: line breaks become `; `.
function M.one_line(text)
  return (text:gsub('%s*\n+%s*', '; '))
end

--- `text` cut to `width` display cells, ending with `…` when it was longer.
function M.fit(text, width)
  if vim.fn.strdisplaywidth(text) <= width then
    return text
  end
  local chars = vim.fn.strchars(text)
  local lo, hi = 0, chars
  -- The longest prefix that leaves one cell for the ellipsis.
  while lo < hi do
    local mid = math.floor((lo + hi + 1) / 2)
    if vim.fn.strdisplaywidth(vim.fn.strcharpart(text, 0, mid)) <= width - 1 then
      lo = mid
    else
      hi = mid - 1
    end
  end
  return vim.fn.strcharpart(text, 0, lo) .. '…'
end

local function by_ts_desc(list)
  local sorted = vim.deepcopy(list)
  table.sort(sorted, function(a, b)
    return a.ts > b.ts
  end)
  return sorted
end

--- `:Soba flight`, most recent first.
function M.flight_lines(records)
  if #records == 0 then
    return { 'No flight records yet.' }
  end
  local lines = {}
  for _, r in ipairs(by_ts_desc(records)) do
    local checkpoint = r.checkpointId ~= vim.NIL and r.checkpointId or '-'
    lines[#lines + 1] = string.format(
      '%s  %-9s %-16s %s → %s (hard %s, soft %s)  %d ms  %s  %s  %s',
      r.ts,
      r.outcome,
      r.trigger,
      M.tokens(r.tokensBefore),
      M.tokens(r.tokensAfter),
      M.tokens(r.hardLimit),
      M.tokens(r.softLimit),
      r.durationMs,
      checkpoint,
      r.sessionId,
      r.reason
    )
  end
  return lines
end

--- `:Soba capsule list`, most recent first.
function M.capsule_lines(capsules)
  if #capsules == 0 then
    return { 'No capsules in the active session yet.' }
  end
  local lines = {}
  for _, c in ipairs(by_ts_desc(capsules)) do
    lines[#lines + 1] = string.format(
      '%s  %s  %s · %s · %s tokens%s',
      c.checkpointId,
      c.title ~= '' and c.title or '(untitled)',
      c.trigger,
      c.quality,
      M.tokens(c.tokens and c.tokens.capsule),
      c.origin == 'loaded' and ' · loaded' or ''
    )
  end
  return lines
end

--- `Auth refactor: hand-off!` → `auth-refactor-hand-off.capsule.md`.
function M.capsule_file_name(title, checkpoint_id)
  local slug = (title or ''):lower():gsub('[^a-z0-9]+', '-'):gsub('^%-+', ''):gsub('%-+$', ''):sub(1, 60)
  return (slug ~= '' and slug or checkpoint_id) .. '.capsule.md'
end

--- `:Soba context`: what fills the window, like Claude Code's `/context`, as lines.
function M.context_lines(ctx)
  local limit = ctx.hardLimit
  local function pct(n)
    return limit > 0 and math.floor(n / limit * 100 + 0.5) or 0
  end
  local function bar(n)
    local width = 24
    local filled = limit > 0 and math.min(width, math.floor(n / limit * width + 0.5)) or 0
    return string.rep('█', filled) .. string.rep('░', width - filled)
  end
  local function row(label, n)
    return string.format('  %-20s %7s %4d%%  %s', label, M.tokens(n), pct(n), bar(n))
  end
  local free = math.max(0, limit - ctx.effectiveTokens)
  local b, k = ctx.breakdown, ctx.byKind
  local extra = M.extra_parts(ctx.effectiveTokens, b, ctx.source)
  local lines = {
    string.format(
      'Context of session %s: %s / %s tokens (%d%% of the hard limit), %s free; %s',
      ctx.sessionId,
      M.tokens(ctx.effectiveTokens),
      M.tokens(limit),
      pct(ctx.effectiveTokens),
      M.tokens(free),
      -- For a followed agent, who compacts; the soft limit is SOBA's promise only where it compacts.
      M.followed(ctx) and ctx.control.note or ('auto-compaction past ' .. M.tokens(ctx.softLimit))
    ),
    '',
    'By part',
    row('System prompt', b.system),
    row('Tool schemas', b.tools),
    row('Capsule', b.capsule),
    row('Retained tail', b.retainedTail),
    row('New entries', b.newEntries),
    row('Free', free),
    '',
    'By kind',
    row('User messages', k.userMessages),
    row('Assistant messages', k.assistantMessages),
    row('File reads', k.fileReads),
    row('Tool outputs', k.toolOutputs),
    row('Capsule', k.capsule),
    row('System + tools', k.system + k.toolSchemas),
  }
  -- The same rest as under "By part", so that the kinds too add up to the total.
  for _, part in ipairs(extra) do
    lines[#lines + 1] = row(part[1]:sub(1, 1):upper() .. part[1]:sub(2), part[2])
  end
  lines[#lines + 1] = ''
  lines[#lines + 1] = 'Largest entries'
  -- Before `Free`, so the parts above it sum to the total.
  for i, part in ipairs(extra) do
    table.insert(lines, 8 + i, row(part[1]:sub(1, 1):upper() .. part[1]:sub(2), part[2]))
  end
  if #ctx.largest == 0 then
    lines[#lines + 1] = '  nothing in the context yet'
  end
  for _, e in ipairs(ctx.largest) do
    lines[#lines + 1] = string.format(
      '  %7s  %-11s %s%s  (%s)',
      M.tokens(e.tokens),
      (e.kind:gsub('_', ' ')),
      e.label,
      e.elided and ' (shortened)' or '',
      (e.part:gsub('_', ' '))
    )
  end
  lines[#lines + 1] = ''
  local c = ctx.capsule
  local own = ctx.agentSummary
  if present(own) then
    lines[#lines + 1] = string.format(
      "Capsule in force: %s's own compaction summary (%s, %s, %s tokens): :Soba capsule show",
      M.agent_name(own.agent),
      present(own.trigger) and own.trigger or 'compaction',
      own.entryId,
      M.tokens(own.tokens)
    )
  elseif c and c ~= vim.NIL then
    local title = (c.title and c.title ~= vim.NIL) and (' "' .. c.title .. '"') or ''
    lines[#lines + 1] = string.format(
      'Capsule in force: %s%s (%s, %s, %s tokens): :Soba capsule show',
      c.checkpointId,
      title,
      c.trigger,
      c.quality,
      M.tokens(c.tokens)
    )
  else
    lines[#lines + 1] = 'Capsule in force: none yet (the session has not been compacted)'
  end
  return lines
end

return M
