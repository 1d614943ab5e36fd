--- SOBA for Neovim: the context budget of the workspace's active agent session in the
--- statusline, and `:Soba` commands over the built-in LSP client talking to `soba serve`.
local format = require('soba.format')

local M = {}

M.defaults = {
  --- Command that starts the daemon; `soba` from PATH by default.
  cmd = { 'soba', 'serve' },
  --- Notify when a compaction starts and with its completion line when it ends.
  notify_compaction = true,
  --- Folders that mark a workspace root, nearest first.
  root_markers = { '.soba', '.git' },
  --- How many flight records `:Soba flight` fetches.
  flight_limit = 50,
  --- setup() calls vim.lsp.enable('soba') unless this is false.
  enable = true,
  --- Extra vim.lsp.config fields for the client (cmd_env, on_exit, root_markers, …).
  lsp = {},
}

M.config = vim.deepcopy(M.defaults)

--- Budget reports by workspace path, and the operations whose end the daemon announced.
local state = {
  reports = {},
  latest_workspace = nil,
  --- The workspace of the file buffer entered last: what special buffers show.
  focus_workspace = nil,
  compacting = {},
  announced = {},
  --- Daemon warnings a compaction's result line already said (its fallback), shown no more.
  absorbed = {},
}
M._state = state

local function notify(msg, level)
  vim.notify('SOBA: ' .. msg, level or vim.log.levels.INFO, { title = 'SOBA' })
end
M.notify = notify

--- Whether vim.notify is Neovim's own, which echoes in the command line (a notification plugin
--- such as nvim-notify or noice shows its own window instead).
local function echoes_in_command_line()
  local info = debug.getinfo(vim.notify, 'S')
  return info ~= nil and info.source:match('vim/_editor%.lua$') ~= nil
end

local echo_highlight = {
  [vim.log.levels.ERROR] = 'ErrorMsg',
  [vim.log.levels.WARN] = 'WarningMsg',
}

--- A notice SOBA sends on its own (a compaction starting or ending, a daemon warning): it must
--- never stop the editor at a hit-enter prompt, which a message wider than the command line or
--- a second message before a redraw does. So in the command line it is one line, fit to the
--- space an echo has, and it replaces the notice before it. :messages keeps what was shown;
--- `:Soba flight` has each compaction's whole reason.
local function notice(msg, level)
  level = level or vim.log.levels.INFO
  local text = 'SOBA: ' .. format.one_line(msg)
  if not echoes_in_command_line() then
    vim.notify(text, level, { title = 'SOBA' })
    return
  end
  -- A redraw first: the previous message is then gone, not scrolled up into a prompt.
  vim.cmd.redraw()
  vim.api.nvim_echo({ { format.fit(text, math.max(vim.v.echospace, 1)), echo_highlight[level] } }, true, {})
end
M.notice = notice

--- Canonical paths, remembered: the statusline asks on every redraw.
local real_paths = {}

local function real(path)
  if not path then
    return nil
  end
  if not real_paths[path] then
    real_paths[path] = vim.uv.fs_realpath(path) or path
  end
  return real_paths[path]
end

--- The soba client attached to `bufnr` (current buffer by default), else any soba client.
function M.client(bufnr)
  local attached = vim.lsp.get_clients({ name = 'soba', bufnr = bufnr or 0 })
  if attached[1] then
    return attached[1]
  end
  return vim.lsp.get_clients({ name = 'soba' })[1]
end

--- The workspace whose active session commands act on.
function M.workspace(client)
  client = client or M.client()
  if client and client.root_dir then
    return real(client.root_dir)
  end
  if client and client.workspace_folders and client.workspace_folders[1] then
    return real(vim.uri_to_fname(client.workspace_folders[1].uri))
  end
  return real(vim.fn.getcwd())
end

--- The root markers in force: `vim.lsp.config('soba', { root_markers = … })` or
--- `setup({ lsp = { root_markers = … } })` when given, else `root_markers` from setup().
function M.root_markers()
  local configured = vim.lsp.config and vim.lsp.config.soba
  local markers = configured and configured.root_markers
  if type(markers) == 'table' and #markers > 0 then
    return markers
  end
  return M.config.root_markers
end

--- The workspace a buffer belongs to: its soba client's, else the nearest folder with a root
--- marker, else the working directory.
function M.buffer_workspace(bufnr)
  bufnr = bufnr or 0
  local attached = vim.lsp.get_clients({ name = 'soba', bufnr = bufnr })[1]
  if attached then
    return M.workspace(attached)
  end
  local name = vim.api.nvim_buf_get_name(bufnr)
  if vim.bo[bufnr].buftype ~= '' or name:match('^%a[%w+.-]*://') then
    -- Help, quickfix, `soba://flight`, terminals: the workspace of the file last worked on.
    if state.focus_workspace then
      return state.focus_workspace
    end
    name = ''
  end
  local from = name ~= '' and vim.fs.dirname(name) or vim.fn.getcwd()
  return real(vim.fs.root(from, M.root_markers()) or vim.fn.getcwd())
end

--- The report the statusline shows: the current buffer's workspace's, and only that one (a
--- budget of another workspace would be a wrong number, not a fallback).
function M.report(bufnr)
  return state.reports[M.buffer_workspace(bufnr)]
end

local function refresh_statusline()
  vim.cmd.redrawstatus({ bang = true })
  vim.api.nvim_exec_autocmds('User', { pattern = 'SobaBudgetChanged', modeline = false })
end

--- Takes a BudgetReport from `soba/budget` or `soba/budgetChanged`.
function M.accept_report(report)
  local workspace = real(report.workspace)
  state.reports[workspace] = report
  state.latest_workspace = workspace
  if not report.compacting then
    state.compacting[report.sessionId] = nil
  end
  refresh_statusline()
end

--- Takes a `soba/session/closed`: the statusline stops showing that session (it says no
--- agent session until the workspace's next session reports).
function M.forget_session(closed)
  local workspace = real(closed.workspace)
  local shown = state.reports[workspace]
  if shown and shown.sessionId == closed.sessionId then
    state.reports[workspace] = nil
    if state.latest_workspace == workspace then
      state.latest_workspace = nil
    end
  end
  state.compacting[closed.sessionId] = nil
  refresh_statusline()
end

--- What the statusline shows while the daemon is connected and no agent session of the
--- buffer's workspace has reported: the plugin works, there is nothing to count yet (an agent
--- appears through the SDK, `soba attach` or `soba proxy`).
M.IDLE_TEXT = 'SOBA: no agent session'

--- `31.2k / 48.8k` (and ` ⟳ 82%` while compacting); `SOBA: no agent session` while the daemon
--- is connected and no session reported; '' without a daemon.
function M.statusline()
  local report = M.report()
  if not report then
    return M.client() and M.IDLE_TEXT or ''
  end
  return format.statusline(report, state.compacting[report.sessionId])
end

--- The statusline item wrapped in its severity highlight, for a plain 'statusline' option.
function M.statusline_hl()
  local report = M.report()
  if not report then
    return M.statusline()
  end
  -- `82%` must reach the screen as text: a bare `%` would start a statusline item (`%*`).
  local text = M.statusline():gsub('%%', '%%%%')
  return '%#' .. format.highlight[format.severity(report)] .. '#' .. text .. '%*'
end

--- A lualine component: `sections = { lualine_x = { require('soba').lualine() } }`.
function M.lualine()
  return {
    function()
      return M.statusline()
    end,
    cond = function()
      return M.statusline() ~= ''
    end,
    color = function()
      local report = M.report()
      return report and format.highlight[format.severity(report)] or nil
    end,
  }
end

--- JSON null arrives as vim.NIL; optional fields may be absent or null.
local function present(value)
  if value == vim.NIL then
    return nil
  end
  return value
end

local function on_compaction(event)
  local id = event.operationId
  -- `:Soba capsule create` reports its own result (or error): a creation is not a compaction.
  local creation = event.trigger == 'handoff'
  if event.phase == 'start' then
    state.compacting[event.sessionId] = 0
    if M.config.notify_compaction and not creation then
      notice(string.format('compacting context (%s)…', event.trigger))
    end
  elseif event.phase == 'progress' then
    state.compacting[event.sessionId] = math.max(state.compacting[event.sessionId] or 0, present(event.percent) or 0)
  elseif event.phase == 'end' then
    state.compacting[event.sessionId] = nil
    local result = present(event.result)
    -- The daemon follows a fallback with a warning of the whole reason (`:Soba flight` keeps
    -- it): where a result line says why (the command that asked, or this notice), the warning
    -- must not replace it.
    local said = state.announced[id] or (M.config.notify_compaction and not creation)
    if result and result.fallback and said then
      state.absorbed[format.fallback_warning(result)] = true
    end
    if not M.claim(id) then
      refresh_statusline()
      return
    end
    -- The line from the result says the quality, and why a fallback fell back; the daemon's
    -- message only when there is no result (the compaction could not be written).
    local line = (result and format.completion_line(result))
      or present(event.message)
      or (event.trigger .. ' compact finished')
    local warn = result and (result.fallback or result.outcome == 'failed')
    if M.config.notify_compaction and not creation then
      notice(line, warn and vim.log.levels.WARN or vim.log.levels.INFO)
    end
  end
  refresh_statusline()
end

--- Claims the showing of an operation's result: true the first time, false once the daemon's
--- end notification or the command that asked for it showed it. The response to
--- `soba/compact` and the end notification may arrive in either order; the result shows once.
function M.claim(operation_id)
  if state.announced[operation_id] then
    return false
  end
  state.announced[operation_id] = true
  return true
end

--- Server → client notifications, installed by lsp/soba.lua and setup().
M.handlers = {
  ['soba/budgetChanged'] = function(_, report)
    M.accept_report(report)
  end,
  ['soba/compaction'] = function(_, event)
    on_compaction(event)
  end,
  -- The daemon's warnings (a compaction that used the local capsule, file changes it cannot
  -- record) arrive unasked, often right after a compaction's end notice: one line each.
  ['window/showMessage'] = function(_, params)
    local levels = vim.log.levels
    local level = ({ levels.ERROR, levels.WARN, levels.INFO, levels.DEBUG })[params.type] or levels.INFO
    if state.absorbed[params.message] then
      state.absorbed[params.message] = nil
      return
    end
    notice(params.message, level)
  end,
  ['soba/session/closed'] = function(_, closed, ctx)
    M.forget_session(closed)
    -- The workspace may have another session: ask, as on attach.
    local client = ctx and vim.lsp.get_client_by_id(ctx.client_id)
    if client then
      M.request_budget(client)
    end
  end,
}

--- `$/progress` from the daemon (work-done progress) updates the statusline percent too.
local function on_lsp_progress(args)
  local client = vim.lsp.get_client_by_id(args.data.client_id)
  if not client or client.name ~= 'soba' then
    return
  end
  local value = args.data.params and args.data.params.value or {}
  local report = M.report()
  if report and value.kind == 'report' and value.percentage then
    state.compacting[report.sessionId] = value.percentage
  elseif report and value.kind == 'end' then
    state.compacting[report.sessionId] = nil
  end
  refresh_statusline()
end

--- How often a client whose workspace shows no budget asks again, in ms. Each miss makes the
--- daemon look for a live agent transcript of the workspace, so an agent started after Neovim
--- (or its next session, after the last one closed) shows up; a shown budget needs no asking,
--- the daemon announces every change.
M.BUDGET_RETRY_MS = 5000

--- Clients with a `soba/budget` request in flight, and each client's retry timer, by client id.
local asking = {}
local retry_timers = {}

--- Ask for the budget of the client's workspace (its active session), and show it.
function M.request_budget(client)
  if asking[client.id] then
    return
  end
  asking[client.id] = true
  local sent = client:request('soba/budget', { workspace = M.workspace(client) }, function(err, report)
    asking[client.id] = nil
    if not err and report then
      M.accept_report(report)
    end
  end)
  if not sent then
    asking[client.id] = nil
  end
end

local function stop_budget_retry(client_id)
  local timer = retry_timers[client_id]
  retry_timers[client_id] = nil
  asking[client_id] = nil
  if timer and not timer:is_closing() then
    timer:stop()
    timer:close()
  end
end

--- While the client's workspace shows no budget, ask again every BUDGET_RETRY_MS.
local function start_budget_retry(client)
  if retry_timers[client.id] then
    return
  end
  local id = client.id
  local timer = assert(vim.uv.new_timer())
  retry_timers[id] = timer
  timer:start(
    M.BUDGET_RETRY_MS,
    M.BUDGET_RETRY_MS,
    vim.schedule_wrap(function()
      local live = vim.lsp.get_client_by_id(id)
      if not live or live:is_stopped() then
        stop_budget_retry(id)
      elseif not state.reports[M.workspace(live)] then
        M.request_budget(live)
      end
    end)
  )
end

local function on_attach(client)
  M.request_budget(client)
  start_budget_retry(client)
end

--- The workspace of a file buffer: the nearest folder holding a root marker, else the working
--- directory. Buffers without a file (a fresh `[No Name]`) get no client: they have no workspace.
local function root_dir(bufnr, on_dir)
  if vim.api.nvim_buf_get_name(bufnr) == '' then
    return
  end
  on_dir(vim.fs.root(bufnr, M.root_markers()) or vim.fn.getcwd())
end

--- The `vim.lsp.config` table for the daemon; lsp/soba.lua returns it.
function M.lsp_config()
  return {
    cmd = M.config.cmd,
    root_dir = root_dir,
    handlers = M.handlers,
    on_attach = on_attach,
  }
end

local function define_highlights()
  vim.api.nvim_set_hl(0, 'SobaBudgetOk', { link = 'DiagnosticOk', default = true })
  vim.api.nvim_set_hl(0, 'SobaBudgetWarning', { link = 'DiagnosticWarn', default = true })
  vim.api.nvim_set_hl(0, 'SobaBudgetError', { link = 'DiagnosticError', default = true })
end

local group = vim.api.nvim_create_augroup('soba', { clear = true })
vim.api.nvim_create_autocmd('LspProgress', { group = group, callback = on_lsp_progress })
vim.api.nvim_create_autocmd('ColorScheme', { group = group, callback = define_highlights })
vim.api.nvim_create_autocmd('BufEnter', {
  group = group,
  callback = function(args)
    local name = vim.api.nvim_buf_get_name(args.buf)
    if vim.bo[args.buf].buftype == '' and name ~= '' and not name:match('^%a[%w+.-]*://') then
      state.focus_workspace = M.buffer_workspace(args.buf)
    end
  end,
})
define_highlights()

--- For users who prefer a setup call to `vim.lsp.enable('soba')`:
--- `require('soba').setup({ cmd = { '/path/to/soba', 'serve' } })`.
function M.setup(opts)
  M.config = vim.tbl_deep_extend('force', vim.deepcopy(M.defaults), opts or {})
  -- `lsp.root_markers` is where users put it (the vim.lsp.config field); root_dir reads it.
  if type(M.config.lsp.root_markers) == 'table' then
    M.config.root_markers = M.config.lsp.root_markers
  end
  vim.lsp.config('soba', vim.tbl_extend('force', M.lsp_config(), M.config.lsp))
  if M.config.enable then
    vim.lsp.enable('soba')
  end
end

return M
