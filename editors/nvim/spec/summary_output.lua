-- busted output handler: the usual terminal report, then one plain closing line that CI reads.
return function(options)
  local busted = require('busted')
  local handler = require('busted.outputHandlers.utfTerminal')(options)
  busted.subscribe({ 'suite', 'end' }, function()
    io.write(string.format('\n%d passed, %d failed\n', #handler.successes, #handler.failures + #handler.errors))
    io.flush()
    return nil, true
  end)
  return handler
end
