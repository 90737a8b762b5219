import re, sys
src = open(sys.argv[1]).read()
def split_top(s):
    parts, depth, cur = [], 0, ''
    for ch in s:
        if ch in '([{': depth += 1
        if ch in ')]}': depth -= 1
        if ch == ',' and depth == 0: parts.append(cur); cur = ''
        else: cur += ch
    parts.append(cur); return parts
pat = re.compile(r'([\w:]+(?:<\w+>)?)\s*<<<(.*?)>>>\s*\((.*?)\);', re.S)
def rep(m):
    name, cfg, args = m.group(1), m.group(2), m.group(3)
    c = split_top(cfg)
    return 'emu::launch(dim3(%s), dim3(%s), [&]() { %s(%s); });' % (c[0].strip(), c[1].strip(), name, args)
out, n = pat.subn(rep, src)
sys.stderr.write('%s: %d launches\n' % (sys.argv[1], n))
print('#include "emu_device.h"\n' + out)
