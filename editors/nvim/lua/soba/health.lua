--- `:checkhealth soba`: binary found, its version, daemon reachable, workspace config valid.
local M = {}

local health = vim.health

--- Keys a config file may hold, by section; others are rejected by the daemon.
--- spec/commands_spec.lua keeps this in step with schemas/config.schema.json.
local CONFIG_KEYS = {
  [''] = { 'compaction', 'model', 'models', 'summarizer', 'storage', 'memory', 'artifacts', 'daemon', 'trustedWorkspaces', '$schema' },
  compaction = {
    'auto',
    'compactOnTurnComplete',
    'compactOnMilestone',
    'minTokensForAutoCompact',
    'minReclaimableTokens',
    'minSavingsRatio',
    'keepRecentTokens',
    'safetyReserveTokens',
    'autoCompactThresholdRatio',
    'timeoutMs',
  },
  model = { 'name', 'contextWindow', 'maxOutputTokens', 'tokenizer', 'countFactor' },
  summarizer = { 'provider', 'baseUrl', 'model', 'apiKeyEnv', 'contextWindow', 'maxOutputTokens', 'cooldownMs', 'redactInput' },
  storage = { 'durability' },
  memory = { 'mirrorExplicitCompacts' },
  artifacts = { 'read', 'write', 'shell', 'patch' },
  daemon = { 'maxIdleSessions' },
}
M.CONFIG_KEYS = CONFIG_KEYS

--- Keys of one entry of `models` (model name → its figures), the user's model catalog.
local CATALOG_ENTRY_KEYS = { 'contextWindow', 'maxOutputTokens', 'tokenizer', 'countFactor' }
M.CATALOG_ENTRY_KEYS = CATALOG_ENTRY_KEYS

--- Problems in a decoded `.soba/config.json`, as messages naming the key; empty when valid.
function M.config_problems(text)
  local ok, decoded = pcall(vim.json.decode, text)
  if not ok then
    return { 'not valid JSON: ' .. tostring(decoded) }
  end
  if type(decoded) ~= 'table' or vim.islist(decoded) and next(decoded) ~= nil then
    return { 'the top level must be a JSON object' }
  end
  local problems = {}
  local check_models
  local function check(section, value)
    local allowed = {}
    for _, key in ipairs(CONFIG_KEYS[section]) do
      allowed[key] = true
    end
    local keys = vim.tbl_keys(value)
    table.sort(keys)
    for _, key in ipairs(keys) do
      local where = section == '' and key or section .. '.' .. key
      if not allowed[key] then
        problems[#problems + 1] = string.format('unknown key "%s"', where)
      elseif section == '' and CONFIG_KEYS[key] then
        if type(value[key]) ~= 'table' then
          problems[#problems + 1] = string.format('"%s" must be an object', where)
        else
          check(key, value[key])
        end
      elseif section == '' and key == 'models' then
        check_models(value[key])
      end
    end
  end
  function check_models(models)
    if type(models) ~= 'table' then
      problems[#problems + 1] = '"models" must be an object'
      return
    end
    local allowed = {}
    for _, key in ipairs(CATALOG_ENTRY_KEYS) do
      allowed[key] = true
    end
    local names = vim.tbl_keys(models)
    table.sort(names)
    for _, name in ipairs(names) do
      local entry = models[name]
      if type(entry) ~= 'table' then
        problems[#problems + 1] = string.format('"models.%s" must be an object', name)
      else
        if entry.contextWindow == nil then
          problems[#problems + 1] = string.format('"models.%s.contextWindow" is missing', name)
        end
        local keys = vim.tbl_keys(entry)
        table.sort(keys)
        for _, key in ipairs(keys) do
          if not allowed[key] then
            problems[#problems + 1] = string.format('unknown key "models.%s.%s"', name, key)
          end
        end
      end
    end
  end
  check('', decoded)
  return problems
end

function M.check()
  local soba = require('soba')
  local cmd = soba.client() and soba.client().config.cmd or soba.config.cmd
  if type(cmd) ~= 'table' then
    health.start('soba: binary')
    health.info('the daemon is started by a function; skipping the binary checks')
  else
    health.start('soba: binary')
    local exe = cmd[1]
    if vim.fn.executable(exe) == 1 then
      health.ok(string.format('`%s` found: %s', exe, vim.fn.exepath(exe)))
      local out = vim.system({ exe, '--version' }, { text = true }):wait(5000)
      if out.code == 0 then
        health.ok('version: ' .. vim.trim(out.stdout))
      else
        health.error(string.format('`%s --version` failed: %s', exe, vim.trim(out.stderr or '')))
      end
    else
      health.error(
        string.format('`%s` not found', exe),
        { 'Install soba (`cargo install --path .` in the SOBA repository)', "or set the path: vim.lsp.config('soba', { cmd = { '/path/to/soba', 'serve' } })" }
      )
    end
  end

  health.start('soba: daemon')
  local client = soba.client()
  if not client then
    health.warn('no soba client is running', { "Enable it with vim.lsp.enable('soba') or require('soba').setup(), then open a file in the workspace" })
  elseif client:is_stopped() then
    health.error('the soba client has stopped; see :LspLog')
  else
    local response = client:request_sync('soba/budget', { workspace = soba.workspace(client) }, 5000)
    if not response then
      health.error('the daemon did not answer soba/budget within 5 s')
    elseif response.err then
      health.warn('daemon reachable; no budget yet: ' .. (response.err.message or vim.inspect(response.err)))
    else
      health.ok(string.format('daemon reachable: session %s at %s', response.result.sessionId, require('soba.format').status_text(response.result)))
    end
  end

  health.start('soba: workspace config')
  local path = vim.fs.joinpath(soba.workspace(client), '.soba', 'config.json')
  local file = io.open(path, 'r')
  if not file then
    health.info('no ' .. path .. ' (built-in defaults and the user config apply)')
    return
  end
  local text = file:read('*a')
  file:close()
  local problems = M.config_problems(text)
  if #problems == 0 then
    health.ok(path .. ' is valid')
  else
    for _, problem in ipairs(problems) do
      health.error(path .. ': ' .. problem)
    end
  end
end

return M
