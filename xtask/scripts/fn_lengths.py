#!/usr/bin/env python3
"""Report function lengths (lines from `fn` to its closing brace) in library code.

Usage: fnlen.py ROOT [MIN]  -- scans ROOT/crates/*/src/**/*.rs, skipping `#[cfg(test)] mod tests`
blocks, and prints functions of at least MIN lines (default 0), longest first.
"""
import re, sys, pathlib

FN = re.compile(r'^\s*(?:pub(?:\([^)]*\))?\s+)?(?:(?:const|async|unsafe|extern\s+"[^"]*")\s+)*fn\s+([A-Za-z_][A-Za-z0-9_]*)')

def strip(line, state):
    """Remove strings, chars and comments; state carries block comment depth / raw string."""
    out = []
    i = 0
    n = len(line)
    while i < n:
        if state['block']:
            if line.startswith('*/', i):
                state['block'] -= 1; i += 2
            elif line.startswith('/*', i):
                state['block'] += 1; i += 2
            else:
                i += 1
            continue
        if state['raw'] is not None:
            end = '"' + '#' * state['raw']
            j = line.find(end, i)
            if j < 0:
                return ''.join(out)
            i = j + len(end); state['raw'] = None
            continue
        if state['str']:
            if line[i] == '\\':
                i += 2; continue
            if line[i] == '"':
                state['str'] = False
            i += 1; continue
        c = line[i]
        if line.startswith('//', i):
            break
        if line.startswith('/*', i):
            state['block'] += 1; i += 2; continue
        m = re.match(r'b?r(#*)"', line[i:])
        if m and (i == 0 or not (line[i-1].isalnum() or line[i-1] == '_')):
            state['raw'] = len(m.group(1)); i += m.end(); continue
        if c == '"':
            state['str'] = True; i += 1; continue
        if c == "'":
            m = re.match(r"'(\\.[^']*|[^\\'])'", line[i:])
            if m:
                i += m.end(); continue
        out.append(c); i += 1
    return ''.join(out)

def functions(path):
    lines = path.read_text().splitlines()
    state = {'block': 0, 'raw': None, 'str': False}
    depth = 0
    stack = []  # (name, start_line, depth_at_open)
    pending = None
    skip_tests_depth = None
    cfg_test = False
    result = []
    for no, raw in enumerate(lines, 1):
        code = strip(raw, state)
        s = code.strip()
        if s.startswith('#[cfg(test)]'):
            cfg_test = True
        elif cfg_test and re.match(r'(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{', s) and skip_tests_depth is None:
            skip_tests_depth = depth
            cfg_test = False
        elif s and not s.startswith('#'):
            cfg_test = False if not re.match(r'(pub(\([^)]*\))?\s+)?mod\s', s) else cfg_test
        m = FN.match(code)
        if m and skip_tests_depth is None:
            pending = (m.group(1), no)
        for ch in code:
            if ch == '{':
                if pending is not None:
                    stack.append((pending[0], pending[1], depth))
                    pending = None
                depth += 1
            elif ch == '}':
                depth -= 1
                if stack and stack[-1][2] == depth:
                    name, start, _ = stack.pop()
                    result.append((no - start + 1, name, start))
                if skip_tests_depth is not None and depth == skip_tests_depth:
                    skip_tests_depth = None
            elif ch == ';' and pending is not None and depth >= 0:
                # A declaration without a body (trait method).
                if not stack or True:
                    pass
        if pending is not None and s.endswith(';') and '{' not in code:
            pending = None
    return result

def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else '.')
    minimum = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    rows = []
    for path in sorted(root.glob('crates/*/src/**/*.rs')):
        for length, name, start in functions(path):
            if length >= minimum:
                rows.append((length, f'{path.relative_to(root)}:{start}', name))
    rows.sort(key=lambda r: -r[0])
    for length, where, name in rows:
        print(f'{length:5} {name:40} {where}')

if __name__ == '__main__':
    main()
