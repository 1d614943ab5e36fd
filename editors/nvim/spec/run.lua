-- Runs the specs with Debian's busted inside headless Neovim (LuaJIT):
--   nvim --headless --clean -l spec/run.lua
-- Prints busted's report, then a closing "N passed, N failed" line; exits non-zero on failures.
local root = vim.fs.dirname(vim.fs.dirname(vim.fs.normalize(debug.getinfo(1, 'S').source:sub(2))))
root = vim.uv.fs_realpath(root) or root

package.path = table.concat({ '/usr/share/lua/5.1/?.lua', '/usr/share/lua/5.1/?/init.lua', package.path }, ';')
for _, dir in ipairs(vim.fn.glob('/usr/lib/*/lua/5.1', false, true)) do
  package.cpath = dir .. '/?.so;' .. package.cpath
end
package.cpath = '/usr/lib/lua/5.1/?.so;' .. package.cpath

vim.opt.runtimepath:prepend(root)
vim.cmd.runtime('plugin/soba.lua')
vim.env.SOBA_NVIM_ROOT = root

-- busted's exit raises a bare error() on Lua 5.1 when tests failed; quit Neovim's way instead.
require('busted.compatibility').exit = function(code)
  io.stdout:flush()
  vim.cmd(code == 0 and 'qall!' or 'cquit 1')
end

_G.arg = { [0] = 'busted', '--output', root .. '/spec/summary_output.lua', root .. '/spec' }
require('busted.runner')({ standalone = false })
