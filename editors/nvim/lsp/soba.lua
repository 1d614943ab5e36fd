-- The daemon's config for Neovim 0.11's built-in client:
--   vim.lsp.enable('soba')
-- Override fields with vim.lsp.config('soba', { cmd = { '/path/to/soba', 'serve' } }).
return require('soba').lsp_config()
