local commands = require('soba.commands')
local health = require('soba.health')

local function complete(cmdline)
  local arg_lead = cmdline:match('(%S*)$')
  return commands.complete(arg_lead, cmdline)
end

describe(':Soba', function()
  it('is defined with completion', function()
    assert.are.equal(2, vim.fn.exists(':Soba'))
    assert.are.same({ 'auto-compact', 'budget', 'cancel', 'capsule', 'compact', 'context', 'flight', 'rewind' }, vim.fn.getcompletion('Soba ', 'cmdline'))
  end)

  it('completes subcommands and their arguments', function()
    assert.are.same({ 'auto-compact', 'budget', 'cancel', 'capsule', 'compact', 'context', 'flight', 'rewind' }, complete('Soba '))
    assert.are.same({ 'cancel', 'capsule', 'compact', 'context' }, complete('Soba c'))
    assert.are.same({ 'off', 'on' }, complete('Soba auto-compact '))
    assert.are.same({ 'on' }, complete('Soba auto-compact on'))
    assert.are.same({ 'create', 'export', 'list', 'load', 'show' }, complete('Soba capsule '))
    assert.are.same({}, complete('Soba budget '))
    local dir = vim.fn.tempname()
    vim.fn.mkdir(dir, 'p')
    vim.fn.writefile({}, dir .. '/hand-off.capsule.md')
    assert.are.same({ dir .. '/hand-off.capsule.md' }, complete('Soba capsule load ' .. dir .. '/hand'))
    vim.fn.delete(dir, 'rf')
  end)

  describe('without a daemon', function()
    local messages
    local original_notify = vim.notify
    before_each(function()
      messages = {}
      vim.notify = function(msg, level)
        messages[#messages + 1] = { msg = msg, level = level }
      end
    end)
    after_each(function()
      vim.notify = original_notify
    end)

    it('explains usage errors', function()
      vim.cmd('Soba frobnicate')
      assert.matches('^SOBA: usage: :Soba budget | context | compact', messages[1].msg)
      vim.cmd('Soba auto-compact maybe')
      assert.are.equal('SOBA: usage: :Soba auto-compact on|off', messages[2].msg)
      vim.cmd('Soba capsule')
      assert.are.equal('SOBA: usage: :Soba capsule create|export|load|list|show', messages[3].msg)
      assert.are.equal(vim.log.levels.ERROR, messages[3].level)
    end)

    it('prints usage for a bare :Soba, as information', function()
      vim.cmd('Soba')
      assert.matches('^SOBA: usage: :Soba budget | context | compact', messages[1].msg)
      assert.matches('rewind', messages[1].msg)
      assert.are.equal(vim.log.levels.INFO, messages[1].level)
    end)

    it(':Soba cancel says the daemon is not running instead of failing', function()
      vim.cmd('Soba cancel')
      assert.matches('the daemon is not running', messages[1].msg)
      assert.are.equal(vim.log.levels.ERROR, messages[1].level)
    end)

    it('says the daemon is not running instead of failing', function()
      vim.cmd('Soba budget')
      assert.matches('the daemon is not running', messages[1].msg)
      assert.are.equal('', require('soba').statusline())
    end)
  end)
end)

describe(':Soba cancel with a fake client', function()
  local soba = require('soba')
  local messages, sent
  local original_notify, original_client, original_report = vim.notify, soba.client, soba.report
  --- A client that answers `soba/budget` with session s_7 and `soba/cancel` with `cancelled`.
  local function fake(cancelled)
    return {
      root_dir = vim.fn.getcwd(),
      request = function(_, method, params, callback)
        sent[#sent + 1] = { method, params }
        if method == 'soba/budget' then
          callback(nil, { sessionId = 's_7', workspace = vim.fn.getcwd(), effectiveTokens = 10, hardLimit = 100, softLimit = 80 })
        elseif method == 'soba/cancel' then
          callback(nil, { cancelled = cancelled })
        else
          callback({ code = -32601, message = 'not scripted: ' .. method })
        end
      end,
    }
  end
  before_each(function()
    messages, sent = {}, {}
    vim.notify = function(msg, level)
      messages[#messages + 1] = { msg = msg, level = level }
    end
  end)
  after_each(function()
    vim.notify, soba.client, soba.report = original_notify, original_client, original_report
  end)

  it('sends soba/cancel for the active session and says it was cancelled', function()
    -- No budget shown yet: the daemon names the active session.
    soba.report = function() end
    soba.client = function()
      return fake(true)
    end
    vim.cmd('Soba cancel')
    assert.are.same({ 'soba/budget', 'soba/cancel' }, { sent[1][1], sent[2][1] })
    assert.are.equal('s_7', sent[2][2].sessionId)
    assert.are.equal('SOBA: cancelled the compaction of session s_7: no capsule is written', messages[1].msg)
    assert.are.equal(vim.log.levels.INFO, messages[1].level)
  end)

  it('cancels the session the statusline shows, and says when none was running', function()
    soba.report = function()
      return { sessionId = 's_shown' }
    end
    soba.client = function()
      return fake(false)
    end
    vim.cmd('Soba cancel')
    assert.are.same({ { 'soba/cancel', { sessionId = 's_shown', workspace = sent[1][2].workspace } } }, sent)
    assert.are.equal('SOBA: no compaction running in session s_shown: nothing to cancel', messages[1].msg)
  end)
end)

describe('setup()', function()
  it('honours lsp.root_markers for the workspace root', function()
    local soba = require('soba')
    local saved = vim.deepcopy(soba.config)
    local dir = vim.uv.fs_realpath(vim.fn.tempname()) or vim.fn.tempname()
    vim.fn.mkdir(dir .. '/project/src', 'p')
    dir = vim.uv.fs_realpath(dir)
    vim.fn.writefile({}, dir .. '/project/.myroot')
    soba.setup({ enable = false, lsp = { root_markers = { '.myroot' } } })
    assert.are.same({ '.myroot' }, soba.root_markers())
    vim.cmd.edit(vim.fn.fnameescape(dir .. '/project/src/main.rs'))
    assert.are.equal(dir .. '/project', soba.buffer_workspace())
    vim.cmd('bwipeout!')
    soba.setup({ enable = false, lsp = { root_markers = saved.root_markers } })
    soba.config = saved
    vim.fn.delete(dir, 'rf')
  end)
end)

describe('health.config_problems', function()
  it('knows the keys of schemas/config.schema.json', function()
    local path = vim.env.SOBA_NVIM_ROOT .. '/../../schemas/config.schema.json'
    assert.are.equal(1, vim.fn.filereadable(path), path .. ' is missing')
    local schema = vim.json.decode(table.concat(vim.fn.readfile(path), '\n'))
    local function keys(t)
      local list = vim.tbl_keys(t or {})
      table.sort(list)
      return list
    end
    local function sorted(list)
      local copy = vim.deepcopy(list)
      table.sort(copy)
      return copy
    end
    local top = keys(schema.properties)
    table.insert(top, '$schema')
    table.sort(top)
    assert.are.same(top, sorted(health.CONFIG_KEYS['']))
    for section, property in pairs(schema.properties) do
      local ref
      for _, alternative in ipairs(property.anyOf or { property }) do
        ref = ref or alternative['$ref']
      end
      -- A section is an object of its own; a top-level list (trustedWorkspaces) has no keys;
      -- `models` maps names to catalog entries.
      if section == 'models' then
        local entry = schema['$defs'][property.additionalProperties['$ref']:match('[^/]+$')]
        assert.are.same(keys(entry.properties), sorted(health.CATALOG_ENTRY_KEYS), section)
      elseif ref then
        local definition = schema['$defs'][ref:match('[^/]+$')]
        assert.are.same(keys(definition.properties), sorted(health.CONFIG_KEYS[section]), section)
      else
        assert.is_nil(health.CONFIG_KEYS[section], section)
      end
    end
  end)

  it('accepts a valid config and names unknown or malformed keys', function()
    assert.are.same({}, health.config_problems('{"compaction": {"keepRecentTokens": 600}, "model": {"name": "x"}}'))
    -- Section names nested elsewhere are plain values there (summarizer.model is a string).
    assert.are.same({}, health.config_problems('{"summarizer": {"provider": "openai", "model": "gpt-4o-mini"}, "artifacts": {"read": {"open_file": "filename"}}}'))
    assert.are.same(
      { 'unknown key "colour"', 'unknown key "compaction.keepRecent"' },
      health.config_problems('{"colour": 1, "compaction": {"keepRecent": 1}}')
    )
    assert.are.same({ '"model" must be an object' }, health.config_problems('{"model": "gpt"}'))
    assert.are.same({}, health.config_problems('{"models": {"acme-coder-7": {"contextWindow": 64000, "maxOutputTokens": 4000}}}'))
    assert.are.same(
      { '"models.a.contextWindow" is missing', 'unknown key "models.a.window"', '"models.b" must be an object' },
      health.config_problems('{"models": {"a": {"window": 1}, "b": 2}}')
    )
    assert.matches('^not valid JSON', health.config_problems('{"compaction": ')[1])
    assert.are.same({ 'the top level must be a JSON object' }, health.config_problems('[1]'))
  end)
end)

describe('doc/soba.txt', function()
  it('builds help tags for every command and function', function()
    local dir = vim.fn.tempname()
    vim.fn.mkdir(dir, 'p')
    vim.fn.writefile(vim.fn.readfile(vim.env.SOBA_NVIM_ROOT .. '/doc/soba.txt'), dir .. '/soba.txt')
    vim.cmd.helptags(vim.fn.fnameescape(dir))
    local tags = table.concat(vim.fn.readfile(dir .. '/tags'), '\n')
    vim.fn.delete(dir, 'rf')
    for _, tag in ipairs({ ':Soba', ':Soba-compact', ':Soba-cancel', 'soba.setup()', 'soba.statusline()', 'soba.lualine()', 'soba-health' }) do
      assert.matches('\n?' .. vim.pesc(tag) .. '\t', tags)
    end
  end)
end)
