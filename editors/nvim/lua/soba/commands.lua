--- `:Soba` subcommands: one function per command, each one request to the daemon.
local format = require('soba.format')
local soba = require('soba')

local M = {}

local levels = vim.log.levels
local METHOD_NOT_FOUND = -32601

--- Sends `method` with the workspace filled in; `on_result(result)` runs on success, errors notify.
local function request(method, params, on_result)
  local client = soba.client()
  if not client then
    soba.notify('the daemon is not running: open a file in a workspace, or check `:checkhealth soba`', levels.ERROR)
    return
  end
  params = vim.tbl_extend('keep', params or {}, { workspace = soba.workspace(client) })
  client:request(method, params, function(err, result)
    if err then
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

function M.compact(args)
  local instructions = vim.trim(table.concat(args, ' '))
  local params = instructions ~= '' and { instructions = instructions } or {}
  request('soba/compact', params, function(result)
    if not soba.claim(result.operationId) then
      return
    end
    local level = result.outcome == 'failed' and levels.ERROR or result.fallback and levels.WARN or levels.INFO
    soba.notify(format.completion_line(result), level)
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
      string.format('capsule "%s" created: %s (%s tokens)', created.title, created.checkpointId, format.tokens(created.tokens))
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
      format_item = function(c)
        return string.format('%s  %s (%s, %s)', c.checkpointId, c.title, c.trigger, c.quality)
      end,
    }, function(choice)
      if choice then
        export_to(choice.checkpointId, choice.title, nil)
      end
    end)
  end)
end

local function capsule_load(args)
  local function send(path)
    if not path or vim.trim(path) == '' then
      return
    end
    request('soba/capsule/load', { path = vim.fn.fnamemodify(path, ':p') }, function(loaded)
      soba.notify(string.format('capsule loaded into session %s as %s', loaded.sessionId, loaded.checkpointId))
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

local capsule_subcommands = {
  create = capsule_create,
  export = capsule_export,
  load = capsule_load,
  list = capsule_list,
}

function M.capsule(args)
  local sub = capsule_subcommands[args[1] or '']
  if not sub then
    soba.notify('usage: :Soba capsule create|export|load|list', levels.ERROR)
    return
  end
  sub(vim.list_slice(args, 2))
end

M.subcommands = {
  budget = M.budget,
  compact = M.compact,
  ['auto-compact'] = M.auto_compact,
  capsule = M.capsule,
  flight = M.flight,
}

--- `:Soba {subcommand} [args]`.
function M.run(fargs)
  local name = fargs[1]
  local sub = name and M.subcommands[name]
  if not sub then
    soba.notify(
      'usage: :Soba budget | compact [instructions] | auto-compact on|off | capsule create|export|load|list | flight',
      levels.ERROR
    )
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
  elseif words[1] == 'capsule' and words[2] == 'export' and #words == 3 then
    return vim.fn.getcompletion(arg_lead, 'file')
  end
  return {}
end

return M
