if vim.g.loaded_soba then
  return
end
vim.g.loaded_soba = true

vim.api.nvim_create_user_command('Soba', function(opts)
  require('soba.commands').run(opts.fargs)
end, {
  nargs = '*',
  desc = 'SOBA: budget | context | compact [instructions] | cancel | auto-compact on|off | capsule create|export|load|list | rewind | flight',
  complete = function(arg_lead, cmdline)
    return require('soba.commands').complete(arg_lead, cmdline)
  end,
})
