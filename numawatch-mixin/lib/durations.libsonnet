// Prometheus durations (`for:` values such as '15m' or '1h30m') in words, for the text of alerts: an alert's
// description says how long its condition has held, and that is its configured `for:`, whatever it is set to.
local units = { y: 'year', w: 'week', d: 'day', h: 'hour', m: 'minute', s: 'second', ms: 'millisecond' };

{
  // '15m' -> '15 minutes', '1h30m' -> '1 hour 30 minutes', '1d' -> '1 day'.
  words(duration)::
    local step(acc, ch) =
      if std.member('0123456789', ch) then
        if acc.unit != '' then acc { parts+: [[acc.number, acc.unit]], number: ch, unit: '' } else acc { number+: ch }
      else if acc.number == '' then error 'not a Prometheus duration: %s' % duration
      else acc { unit+: ch };
    local scanned = std.foldl(step, std.stringChars(duration), { parts: [], number: '', unit: '' });
    local parts = scanned.parts + [[scanned.number, scanned.unit]];
    local word(part) =
      local count = std.parseInt(part[0]);
      if !std.objectHas(units, part[1]) then error 'not a Prometheus duration: %s' % duration
      else '%d %s%s' % [count, units[part[1]], if count == 1 then '' else 's'];
    std.join(' ', [word(part) for part in parts]),
}
