-- `:help soba` after the documented install: the plugin folder on 'runtimepath' (a pack/*/start
-- link) ships doc/tags, so nobody has to run :helptags, and the shipped tags are current.
local root = vim.env.SOBA_NVIM_ROOT

describe(':help soba', function()
  it('ships doc/tags as :helptags writes it for doc/soba.txt', function()
    local shipped = root .. '/doc/tags'
    assert.are.equal(1, vim.fn.filereadable(shipped), 'doc/tags is missing: run nvim --headless -c "helptags doc" -c q')
    local copy = vim.fn.tempname()
    vim.fn.mkdir(copy, 'p')
    vim.fn.writefile(vim.fn.readfile(root .. '/doc/soba.txt', 'b'), copy .. '/soba.txt', 'b')
    vim.cmd.helptags(vim.fn.fnameescape(copy))
    assert.are.same(
      vim.fn.readfile(copy .. '/tags'),
      vim.fn.readfile(shipped),
      'doc/tags is stale: regenerate it with nvim --headless -c "helptags editors/nvim/doc" -c q'
    )
    vim.fn.delete(copy, 'rf')
  end)

  it('opens soba.txt from a pack/*/start install', function()
    local site = vim.fn.tempname()
    vim.fn.mkdir(site .. '/pack/soba/start', 'p')
    vim.uv.fs_symlink(root, site .. '/pack/soba/start/soba')
    local saved_rtp, saved_pp = vim.o.runtimepath, vim.o.packpath
    -- Only the documented install: the repository folder itself is off the path.
    vim.opt.runtimepath:remove(root)
    vim.o.packpath = site
    vim.cmd('packloadall!')
    for _, topic in ipairs({ 'soba', ':Soba-rewind', 'soba.setup()', 'soba-statusline' }) do
      vim.cmd.help(topic)
      assert.are.equal('soba.txt', vim.fn.expand('%:t'), topic)
      vim.cmd.helpclose()
    end
    vim.o.runtimepath, vim.o.packpath = saved_rtp, saved_pp
    vim.fn.delete(site, 'rf')
  end)
end)
