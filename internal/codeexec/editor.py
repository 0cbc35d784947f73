# codeinterp's text_editor_code_execution, run in the container's sandbox as
# its user by `python3 -I -c` with the request as base64 JSON on stdin. It
# answers one line: the marker, then JSON. Relative paths are from the
# working directory bash left (the session's prologue ran before it).
import base64, json, os, stat, sys

MARK = "\x1eCODEINTERP-EDIT "
IMAGES = {".png": "image", ".jpg": "image", ".jpeg": "image", ".gif": "image", ".webp": "image", ".pdf": "pdf"}


def answer(o):
    sys.stdout.write(MARK + json.dumps(o, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def fail(code, message):
    answer({"error": code, "message": message})


def lines_of(text):
    # Lines as an editor numbers them: a final newline ends the last line
    # rather than starting an empty one.
    ls = text.split("\n")
    if len(ls) > 1 and ls[-1] == "":
        ls.pop()
    return ls


def regular(path):
    # A FIFO, a device or a socket (the sandbox's control FIFOs among them)
    # would block the editor or steal another reader's bytes: text files only.
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise ValueError("%s is not a regular file" % path)


def read_text(path, limit):
    regular(path)
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError("the file is larger than the %d bytes the editor handles; use bash" % limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("the file is not UTF-8 text; use bash to inspect it")


def view(req, path, limit):
    if os.path.isdir(path):
        out = []
        for root, dirs, files in os.walk(path):
            depth = root[len(path):].count(os.sep)
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            if depth >= 1:
                dirs[:] = []
            for name in sorted(dirs) + sorted(f for f in files if not f.startswith(".")):
                out.append(os.path.join(root, name))
        text = "\n".join(out) + ("\n" if out else "")
        n = len(lines_of(text)) if out else 0
        return {"type": "text_editor_code_execution_view_result", "file_type": "text", "content": text[:limit],
                "num_lines": n, "start_line": 1, "total_lines": n}
    kind = IMAGES.get(os.path.splitext(path)[1].lower())
    if kind:
        regular(path)
        with open(path, "rb") as f:
            data = f.read(limit * 3 // 4 + 1)
        if len(data) > limit * 3 // 4:
            raise ValueError("the file is too large to view")
        return {"type": "text_editor_code_execution_view_result", "file_type": kind,
                "content": base64.b64encode(data).decode(), "num_lines": None, "start_line": None, "total_lines": None}
    ls = lines_of(read_text(path, limit))
    total, first, last = len(ls), 1, len(ls)
    vr = req.get("view_range")
    if vr is not None:
        if (not isinstance(vr, list) or len(vr) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) for x in vr)):
            raise LookupError("view_range must be two integers [first, last]")
        first, last = vr
        if last == -1:
            last = total
        if first < 1 or first > max(total, 1) or last < first or last > total:
            raise LookupError("Invalid view_range %s: the file has %d lines; first must be in [1, %d] and last in [first, %d] or -1" % (vr, total, max(total, 1), total))
    shown = ls[first - 1:last]
    return {"type": "text_editor_code_execution_view_result", "file_type": "text",
            "content": "".join(l + "\n" for l in shown), "num_lines": len(shown), "start_line": first, "total_lines": total}


def create(req, path):
    text = req.get("file_text")
    if not isinstance(text, str):
        raise LookupError("create needs file_text (a string)")
    update = os.path.lexists(path)
    if update and not os.path.isdir(path):
        regular(path)
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    return {"type": "text_editor_code_execution_create_result", "is_file_update": update}


def str_replace(req, path, limit):
    old, new = req.get("old_str"), req.get("new_str", "")
    if not isinstance(old, str) or old == "":
        raise LookupError("str_replace needs old_str (a non-empty string)")
    if new is None:
        new = ""
    if not isinstance(new, str):
        raise LookupError("new_str must be a string")
    text = read_text(path, limit)
    n = text.count(old)
    if n == 0:
        raise LookupError("No replacement was performed, old_str `%s` did not appear verbatim in %s." % (old, req["path"]))
    if n > 1:
        starts, i = [], text.find(old)
        while i >= 0:
            starts.append(text.count("\n", 0, i) + 1)
            i = text.find(old, i + 1)
        raise LookupError("No replacement was performed. Multiple occurrences of old_str `%s` in lines %s. Please ensure it is unique." % (old, starts))
    i = text.find(old)
    start = text.count("\n", 0, i) + 1
    after = text[:i] + new + text[i + len(old):]
    old_ls = text.split("\n")[start - 1:start + old.count("\n")]
    new_ls = after.split("\n")[start - 1:start + new.count("\n")]
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(after)
    return {"type": "text_editor_code_execution_str_replace_result", "old_start": start, "old_lines": len(old_ls),
            "new_start": start, "new_lines": len(new_ls), "lines": ["-" + l for l in old_ls] + ["+" + l for l in new_ls]}


def main():
    try:
        req = json.loads(base64.b64decode(sys.stdin.buffer.read()))
    except Exception:
        return fail("invalid_tool_input", "the editor's request could not be read")
    limit = int(req.get("limit") or 1 << 20)
    path = req["path"]
    if not os.path.isabs(path):
        path = os.path.join(os.getcwd(), path)
    cmd = req["command"]
    try:
        if cmd == "view":
            out = view(req, path, limit)
        elif cmd == "create":
            out = create(req, path)
        else:
            out = str_replace(req, path, limit)
    except FileNotFoundError:
        return fail("file_not_found", "The path %s does not exist." % req["path"])
    except IsADirectoryError:
        return fail("invalid_tool_input", "%s is a directory." % req["path"])
    except (LookupError, ValueError) as e:
        return fail("invalid_tool_input", str(e))
    except OSError as e:
        return fail("invalid_tool_input", "%s: %s" % (req["path"], e.strerror or type(e).__name__))
    answer({"ok": out})


main()
