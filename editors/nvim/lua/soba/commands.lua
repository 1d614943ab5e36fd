--- `:Soba` subcommands: one function per command, each one request to the daemon.
local format = require('soba.format')
local soba = require('soba')

local M = {}

local levels = vim.log.levels
local METHOD_NOT_FOUND = -32601
--- The daemon refused to change a session whose agent compacts it itself.
local AGENT_COMPACTS = -32005

--- Sends `method` with the workspace filled in; `on_result(result)` runs on success, errors
--- notify unless `on_error(err)` returns true (it handled them).
local function request(method, params, on_result, on_error)
  local client = soba.client()
  if not client then
    soba.notify('the daemon is not running: open a file in a workspace, or check `:checkhealth soba`', levels.ERROR)
    return
  end
  params = vim.tbl_extend('keep', params or {}, { workspace = soba.workspace(client) })
  client:request(method, params, function(err, result)
    if err then
      if on_error and on_error(err) then
        return
      end
      if err.code == METHOD_NOT_FOUND then
        soba.notify(method .. ' is not supported by this soba daemon: update soba', levels.ERROR)
      else
        soba.notify(err.message or vim.inspect(err), levels.ERROR)
      end
      return
    end
    on_result(result)
  end)
end
M.request = request

local function show_lines(lines)
  soba.notify(table.concat(lines, '\n'))
end

function M.budget()
  request('soba/budget', {}, function(report)
    soba.accept_report(report)
    show_lines(format.budget_lines(report))
  end)
end

--- Shows `lines` in the scratch buffer `name` (reused), in a split.
local function scratch(name, lines, filetype)
  local existing = vim.fn.bufnr(name)
  local buf = existing ~= -1 and existing or vim.api.nvim_create_buf(false, true)
  if existing == -1 then
    vim.api.nvim_buf_set_name(buf, name)
    vim.bo[buf].bufhidden = 'wipe'
  end
  vim.bo[buf].modifiable = true
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  if filetype then
    vim.bo[buf].filetype = filetype
  end
  if vim.fn.bufwinid(buf) == -1 then
    vim.cmd('botright sbuffer ' .. buf)
  end
  return buf
end

--- What SOBA would send after `params.action`, in `soba://preview`: the agent is not touched.
local function preview(params)
  request('soba/preview', params, function(result)
    scratch('soba://preview', vim.split(result.text, '\n', { plain = true }), 'markdown')
  end)
end

local function agent_compacts(err)
  return err.code == AGENT_COMPACTS
end

function M.compact(args)
  local instructions = vim.trim(table.concat(args, ' '))
  local params = instructions ~= '' and { instructions = instructions } or {}
  if format.followed(soba.report()) then
    return preview(vim.tbl_extend('force', params, { action = 'compact' }))
  end
  request('soba/compact', params, function(result)
    if not soba.claim(result.operationId) then
      return
    end
    local level = result.outcome == 'failed' and levels.ERROR or result.fallback and levels.WARN or levels.INFO
    local line = format.completion_line(result)
    -- The same notice as the daemon's end notification, whichever arrives first.
    soba.notice(line, level)
  end, function(err)
    -- A followed session the statusline had not shown yet: the daemon changed nothing.
    if agent_compacts(err) then
      preview(vim.tbl_extend('force', params, { action = 'compact' }))
      return true
    end
  end)
end

--- `:Soba cancel`: stops the compaction of the workspace's active session, running (the
--- agent's own too, even mid-model-call) or waiting behind the agent's model call. It ends
--- `cancelled` and writes no capsule; its end notice says so.
function M.cancel()
  local function send(session_id)
    request('soba/cancel', { sessionId = session_id }, function(result)
      if result.cancelled then
        soba.notify(string.format('cancelled the compaction of session %s: no capsule is written', session_id))
      else
        soba.notify(string.format('no compaction running in session %s: nothing to cancel', session_id))
      end
    end)
  end
  local shown = soba.report()
  if shown then
    return send(shown.sessionId)
  end
  request('soba/budget', {}, function(report)
    send(report.sessionId)
  end)
end

function M.auto_compact(args)
  local choice = args[1]
  if choice ~= 'on' and choice ~= 'off' then
    soba.notify('usage: :Soba auto-compact on|off', levels.ERROR)
    return
  end
  request('soba/autoCompact', { enabled = choice == 'on' }, function(result)
    soba.notify('auto-compact is ' .. (result.autoCompact and 'on' or 'off') .. ' for the active session')
  end)
end

local function capsule_create(args)
  local title = vim.trim(table.concat(args, ' '))
  if title == '' then
    soba.notify('usage: :Soba capsule create {title}', levels.ERROR)
    return
  end
  request('soba/capsule/create', { title = title }, function(created)
    soba.notify(
      string.format(
        'capsule "%s" created: %s (%s tokens); it compacts nothing, the context stays as it was: export it to hand it off',
        created.title,
        created.checkpointId,
        format.tokens(created.tokens)
      )
    )
  end)
end

local function export_to(checkpoint_id, title, path)
  local function send(target)
    if not target or vim.trim(target) == '' then
      return
    end
    request('soba/capsule/export', { checkpointId = checkpoint_id, path = vim.fn.fnamemodify(target, ':p') }, function(exported)
      soba.notify(string.format('capsule %s exported to %s', checkpoint_id, exported.path))
    end)
  end
  if path then
    send(path)
  else
    vim.ui.input(
      { prompt = 'Export capsule to: ', default = format.capsule_file_name(title, checkpoint_id), completion = 'file' },
      send
    )
  end
end

local function capsule_export(args)
  if args[1] then
    export_to(args[1], '', args[2])
    return
  end
  request('soba/capsule/list', {}, function(result)
    if #result.capsules == 0 then
      soba.notify('the active session has no checkpoints yet: compact it or create a capsule first')
      return
    end
    local newest_first = {}
    for i = #result.capsules, 1, -1 do
      newest_first[#newest_first + 1] = result.capsules[i]
    end
    vim.ui.select(newest_first, {
      prompt = 'Checkpoint to export as a Portable Capsule',
      format_item = format.checkpoint_item,
    }, function(choice)
      if choice then
        export_to(choice.checkpointId, choice.title, nil)
      end
    end)
  end)
end

--- Asks a yes/no question; true only for yes. Specs replace it.
function M.confirm(question, yes)
  return vim.fn.confirm(question, '&' .. yes .. '\n&Cancel', 2, 'Question') == 1
end

local function capsule_load(args)
  local function load(path)
    request('soba/capsule/load', { path = path }, function(loaded)
      soba.notify(string.format('capsule loaded into session %s as %s', loaded.sessionId, loaded.checkpointId))
    end)
  end
  local function send(path)
    if not path or vim.trim(path) == '' then
      return
    end
    path = vim.fn.fnamemodify(path, ':p')
    local client = soba.client()
    if not client then
      return load(path) -- says the daemon is not running
    end
    -- Loading replaces what the model sees: ask first when there is a live context to replace.
    client:request('soba/budget', { workspace = soba.workspace(client) }, function(err, report)
      if not err and format.followed(report) then
        return preview({ action = 'capsuleLoad', path = path })
      end
      if not err and report and (report.effectiveTokens or 0) > 0 then
        local question = string.format(
          'Replace the live context (%s tokens, session %s) with %s?\n'
            .. 'Nothing is deleted: :Soba rewind goes back to an earlier checkpoint.',
          format.tokens(report.effectiveTokens),
          report.sessionId,
          vim.fn.fnamemodify(path, ':t')
        )
        if not M.confirm(question, 'Load') then
          soba.notify('capsule not loaded')
          return
        end
      end
      load(path)
    end)
  end
  if args[1] then
    send(args[1])
  else
    vim.ui.input({ prompt = 'Load capsule: ', completion = 'file' }, send)
  end
end

local function capsule_list()
  request('soba/capsule/list', {}, function(result)
    show_lines(format.capsule_lines(result.capsules))
  end)
end

--- `:Soba context`: what fills the window, in `soba://context`.
function M.context()
  request('soba/context', { limit = 15 }, function(ctx)
    scratch('soba://context', format.context_lines(ctx))
  end)
end

--- `:Soba capsule show`: the capsule in force, as the model reads it, in `soba://capsule`.
local function capsule_show()
  request('soba/context', { limit = 0 }, function(ctx)
    -- A followed agent that compacted itself: its own summary is what its context starts from.
    local own = ctx.agentSummary
    if own and own ~= vim.NIL then
      local header = string.format(
        "<!-- %s's own compaction summary (%s, %s, %s): %s tokens -->",
        format.agent_name(own.agent),
        own.trigger ~= vim.NIL and own.trigger or 'compaction',
        own.entryId,
        own.ts,
        format.tokens(own.tokens)
      )
      scratch('soba://capsule', vim.list_extend({ header, '' }, vim.split(own.text, '\n', { plain = true })), 'markdown')
      return
    end
    local c = ctx.capsule
    if not c or c == vim.NIL then
      soba.notify('the active session has no capsule yet: it has not been compacted')
      return
    end
    scratch('soba://capsule', vim.split(c.text, '\n', { plain = true }), 'markdown')
  end)
end

--- Shows flight records in a scratch buffer named `soba://flight`.
function M.flight()
  request('soba/flight', { limit = soba.config.flight_limit }, function(result)
    local lines = format.flight_lines(result.records)
    local existing = vim.fn.bufnr('soba://flight')
    local buf = existing ~= -1 and existing or vim.api.nvim_create_buf(false, true)
    if existing == -1 then
      vim.api.nvim_buf_set_name(buf, 'soba://flight')
      vim.bo[buf].bufhidden = 'wipe'
    end
    vim.bo[buf].modifiable = true
    vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
    vim.bo[buf].modifiable = false
    if vim.fn.bufwinid(buf) == -1 then
      vim.cmd('botright sbuffer ' .. buf)
    end
  end)
end

--- Checkpoints of the active session, newest first, for pickers.
local function newest_first(capsules)
  local out = {}
  for i = #capsules, 1, -1 do
    out[#out + 1] = capsules[i]
  end
  return out
end

--- `:Soba rewind [checkpoint-id]`: move the active session's leaf back to a checkpoint. The
--- later entries stay in the log as a branch, so the rewind itself can be undone from the list.
function M.rewind(args)
  request('soba/budget', {}, function(report)
    request('soba/capsule/list', { sessionId = report.sessionId }, function(result)
      local function go(chosen)
        if not chosen then
          return
        end
        if format.followed(report) then
          return preview({ action = 'rewind', sessionId = report.sessionId, entryId = chosen.entryId })
        end
        local question = string.format(
          'Rewind session %s (%s tokens) to %s %s (%s tokens)?',
          report.sessionId,
          format.tokens(report.effectiveTokens),
          chosen.checkpointId,
          chosen.title ~= vim.NIL and chosen.title or '',
          format.tokens(chosen.tokens.after)
        )
        if not M.confirm(question, 'Rewind') then
          return
        end
        request('soba/rewind', { sessionId = report.sessionId, entryId = chosen.entryId }, function(rewound)
          soba.accept_report(rewound.budget)
          soba.notify(string.format('rewound to %s: %s', chosen.checkpointId, format.status_text(rewound.budget)))
        end)
      end
      if #result.capsules == 0 then
        soba.notify('the active session has no checkpoints to rewind to: compact it or create a capsule first')
        return
      end
      if args[1] then
        for _, c in ipairs(result.capsules) do
          if c.checkpointId == args[1] then
            return go(c)
          end
        end
        soba.notify('no checkpoint ' .. args[1] .. ' in the active session: see :Soba capsule list', levels.ERROR)
        return
      end
      vim.ui.select(newest_first(result.capsules), {
        prompt = 'Checkpoint to rewind to',
        format_item = format.checkpoint_item,
      }, go)
    end)
  end)
end

local capsule_subcommands = {
  create = capsule_create,
  export = capsule_export,
  load = capsule_load,
  list = capsule_list,
  show = capsule_show,
}

function M.capsule(args)
  local sub = capsule_subcommands[args[1] or '']
  if not sub then
    soba.notify('usage: :Soba capsule create|export|load|list|show', levels.ERROR)
    return
  end
  sub(vim.list_slice(args, 2))
end

M.subcommands = {
  budget = M.budget,
  compact = M.compact,
  cancel = M.cancel,
  ['auto-compact'] = M.auto_compact,
  capsule = M.capsule,
  flight = M.flight,
  rewind = M.rewind,
  context = M.context,
}

M.USAGE =
  'usage: :Soba budget | context | compact [instructions] | cancel | auto-compact on|off | capsule create|export|load|list|show | rewind [checkpoint] | flight'

--- `:Soba {subcommand} [args]`.
function M.run(fargs)
  local name = fargs[1]
  if not name then
    -- A bare `:Soba` asks what there is: an answer, not an error.
    soba.notify(M.USAGE)
    return
  end
  local sub = M.subcommands[name]
  if not sub then
    soba.notify(M.USAGE, levels.ERROR)
    return
  end
  sub(vim.list_slice(fargs, 2))
end

local function sorted_keys(t)
  local keys = vim.tbl_keys(t)
  table.sort(keys)
  return keys
end

local function matching(candidates, prefix)
  return vim.tbl_filter(function(c)
    return vim.startswith(c, prefix)
  end, candidates)
end

--- Checkpoint ids of the active session, newest first, asked synchronously (completion cannot
--- wait for a callback); empty when the daemon does not answer within half a second.
function M.checkpoint_ids()
  local client = soba.client()
  if not client then
    return {}
  end
  local response = client:request_sync('soba/capsule/list', { workspace = soba.workspace(client) }, 500)
  if not response or response.err or not response.result then
    return {}
  end
  return vim.tbl_map(function(c)
    return c.checkpointId
  end, newest_first(response.result.capsules))
end

--- Completion for `:Soba`: subcommands, their arguments, and file names where a path goes.
function M.complete(arg_lead, cmdline)
  local words = vim.split((cmdline:gsub('^%s*%S+%s*', '')), '%s+', { trimempty = true })
  -- The word being completed is not finished yet: drop it from the context.
  if arg_lead ~= '' then
    table.remove(words)
  end
  if #words == 0 then
    return matching(sorted_keys(M.subcommands), arg_lead)
  elseif words[1] == 'auto-compact' and #words == 1 then
    return matching({ 'off', 'on' }, arg_lead)
  elseif words[1] == 'capsule' and #words == 1 then
    return matching(sorted_keys(capsule_subcommands), arg_lead)
  elseif words[1] == 'capsule' and words[2] == 'load' and #words == 2 then
    return vim.fn.getcompletion(arg_lead, 'file')
  elseif (words[1] == 'capsule' and words[2] == 'export' and #words == 2) or (words[1] == 'rewind' and #words == 1) then
    return matching(M.checkpoint_ids(), arg_lead)
  elseif words[1] == 'capsule' and words[2] == 'export' and #words == 3 then
    return vim.fn.getcompletion(arg_lead, 'file')
  end
  return {}
end

return M
