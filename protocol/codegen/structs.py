"""Emits one generated struct class: constructor, `_write` and `_read`.

Theory of operation.  A struct's code is specialised twice over:

* by *flexibility* — when a struct exists in both non-flexible and flexible versions, `_write`
  and `_read` start with ``if version >= FLEXIBLE_MIN:`` and hold two straight-line bodies, one
  with the classic encodings (int16 string lengths, int32 array counts) and one with the
  compact encodings and the tagged-field section.  No per-field "is it compact?" test remains;
* by *presence* — inside each body a field is wrapped in ``if version >= N:`` only when it does
  not exist in every version that body can see (see versions.condition).

Adjacent fixed-width fields under the same condition are packed and unpacked with one
precompiled `struct.Struct` (e.g. partition_index, error_code, high_watermark as ">ihq").

Decoding: `_read` builds the object with `object.__new__` and assigns every slot (fields absent
from the version get their default).  It keeps the name of the field being read in `f` (and
the array index in `idx`), so that a failure anywhere below turns into a ProtocolError whose
path and offset point at the bad field; struct.error / IndexError / UnicodeDecodeError never
leave `_read`.

Tagged fields (flexible versions only) are written only when they differ from their default,
as Kafka does, and in ascending tag order merged with the unknown tags kept from decoding.
"""
from .spec import Field
from .versions import NO_VERSIONS, Versions, condition

FIXED = {"int8": ("b", 1), "int16": ("h", 2), "int32": ("i", 4), "int64": ("q", 8),
         "uint16": ("H", 2), "uint32": ("I", 4), "float64": ("d", 8), "bool": ("?", 1)}
_NAME_CODES = {"?": "z"}


class Lines:
    """Indented source lines."""

    def __init__(self, indent=0):
        self.lines = []
        self.level = indent

    def __call__(self, text):
        self.lines.append("    " * self.level + text if text else "")

    def block(self, header):
        self(header)
        return _Indent(self)


class _Indent:
    def __init__(self, lines):
        self.out = lines

    def __enter__(self):
        self.out.level += 1

    def __exit__(self, *exc):
        self.out.level -= 1


class StructEmitter:
    """Emits the classes of one message; `struct_formats` collects the struct.Struct constants."""

    def __init__(self, message, struct_formats):
        self.message = message
        self.formats = struct_formats
        # structs that need _is_default(): tagged struct fields, and struct fields inside those
        self.default_checked = set()
        pending = [f.struct for st in [message.root, *message.structs] for f in st.fields
                   if f.is_struct and not f.is_array and not f.tagged.empty]
        while pending:
            st = pending.pop()
            if st.name not in self.default_checked:
                self.default_checked.add(st.name)
                pending.extend(f.struct for f in st.fields if f.is_struct and not f.is_array)
        self.top = message.name

    # --- helpers ---------------------------------------------------------------------------

    def fmt(self, codes):
        name = "_S_" + "".join(_NAME_CODES.get(c, c) for c in codes)
        self.formats[name] = ">" + codes
        return name

    def array_table(self, code, compact, fields=""):
        lead = "".join(_NAME_CODES.get(c, c) for c in fields)
        name = f"_{'CA' if compact else 'A'}_{lead + '_' if lead else ''}{_NAME_CODES.get(code, code)}"
        self.formats[name] = (fields, code, compact)
        return name

    def multi_table(self, layout, compact):
        spelled = "".join(_NAME_CODES.get(c, c) for c in layout)
        name = f"_{'CM' if compact else 'M'}_" + spelled.replace("[", "_a").replace("]", "").lstrip("_")
        self.formats[name] = ("multi", layout, compact)
        return name

    def emit_is_default(self, struct, out):
        """`_is_default()`: does the struct equal a new default instance?  Tagged struct fields
        are written only when it is False; comparing field by field is much cheaper than
        building a default instance and calling __eq__ for every partition of a response."""
        tests = []
        for f in struct.fields:
            default = self.default_expr(f)
            if default.endswith("()"):
                tests.append(f"self.{f.attr}._is_default()")
            elif default in ("None", "True", "False"):
                tests.append(f"self.{f.attr} is {default}")
            else:
                tests.append(f"self.{f.attr} == {default}")
        tests.append("not self.unknown_tagged_fields")
        out("def _is_default(self):")
        out(f"    return ({tests[0]}")
        for test in tests[1:]:
            out(f"            and {test}")
        out("            )")

    def cls_ref(self, struct):
        return self.top if struct is self.message.root else f"{self.top}.{struct.name}"

    def default_expr(self, f: Field):
        d = f.default
        # None is the default of fields nullable in every version they exist in; a field that
        # became nullable later defaults to a value its older versions can encode.
        always_null = f.nullable.covers(f.versions)
        if f.is_array:
            return "None" if d == "null" else "[]"
        if f.is_struct:
            return "None" if (d == "null" or always_null) else f"{self.cls_ref(f.struct)}()"
        t = f.type
        if t in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
            return str(int(str(d), 0)) if d not in (None, "") else "0"
        if t == "bool":
            return "True" if d in (True, "true") else "False"
        if t == "float64":
            return repr(float(d)) if d not in (None, "") else "0.0"
        if t == "string":
            if d == "null" or (d is None and always_null):
                return "None"
            return repr(d or "")
        if t == "bytes":
            return "None" if (d == "null" or always_null) else 'b""'
        if t == "records":
            return "None"
        if t == "uuid":
            return "ZERO_UUID"
        raise ValueError(f"no default for type {t}")

    @staticmethod
    def branches(struct_versions: Versions, flexible: Versions):
        """[(versions, is_flexible)] — at most two bodies per struct."""
        flex = flexible & struct_versions
        if flex.empty:
            return [(struct_versions, False)]
        if flex == struct_versions:
            return [(struct_versions, True)]
        return [(flex, True), (Versions(struct_versions.lo, flex.lo - 1), False)]

    @staticmethod
    def is_tagged(f, within, flexible):
        if not flexible:
            return False
        present = f.versions & within
        tagged = f.tagged & present
        if tagged.empty:
            return False
        if tagged != present:
            raise ValueError(f"field {f.name} is tagged in only part of its versions")
        return True

    @staticmethod
    def compact(f, flexible):
        if not flexible:
            return False
        if f.compact is None:
            return True
        if f.compact == NO_VERSIONS:
            return False
        raise ValueError(f"unsupported field-level flexibleVersions on {f.name}")

    # --- class -----------------------------------------------------------------------------

    def emit_class(self, struct, out: Lines, nested=()):
        is_root = struct is self.message.root
        out(f"class {struct.name}(Message):")
        with _Indent(out):
            for child in nested:
                self.emit_class(child, out)
                out("")
            m = self.message
            out(f"API_KEY = {m.api_key!r}")
            out(f"MIN_VERSION = {struct.versions.lo}")
            out(f"MAX_VERSION = {struct.versions.hi}")
            flex = m.flexible & struct.versions
            out(f"FLEXIBLE_MIN = {None if flex.empty else flex.lo}")
            attrs = [f.attr for f in struct.fields]
            out(f"__slots__ = {tuple(attrs + ['unknown_tagged_fields'])!r}")
            out(f"_FIELDS = {tuple(attrs)!r}")
            out("# (attr, type or nested class name, is_array, versions, nullable versions, tag)")
            out("_SCHEMA = (")
            for f in struct.fields:
                out(f"    {self.schema_row(f, struct.versions)!r},")
            out(")")
            out("")
            self.emit_init(struct, out)
            out("")
            if struct.name in self.default_checked:
                self.emit_is_default(struct, out)
                out("")
            self.emit_write(struct, out)
            out("")
            self.emit_read(struct, out)
        if is_root:
            out("")

    @staticmethod
    def schema_row(f, within):
        def pair(v):
            v = v & f.versions & within
            return None if v.empty else (v.lo, v.hi)
        tag = f.tag if not (f.tagged & f.versions & within).empty else None
        return (f.attr, f.type, f.is_array, pair(f.versions), pair(f.nullable), tag)

    def emit_init(self, struct, out):
        params = []
        body = []
        for f in struct.fields:
            default = self.default_expr(f)
            if default in ("[]",) or default.endswith("()"):
                sentinel = "DEFAULT" if f.ever_nullable else "None"
                params.append(f"{f.attr}={sentinel}")
                body.append(f"self.{f.attr} = {default} if {f.attr} is {sentinel} else {f.attr}")
            else:
                params.append(f"{f.attr}={default}")
                body.append(f"self.{f.attr} = {f.attr}")
        params.append("unknown_tagged_fields=None")
        body.append("self.unknown_tagged_fields = unknown_tagged_fields")
        out(f"def __init__(self, {', '.join(params)}):")
        with _Indent(out):
            for line in body:
                out(line)

    # --- encode ----------------------------------------------------------------------------

    def emit_write(self, struct, out):
        out("def _write(self, buf, pieces, version):")
        with _Indent(out):
            branches = self.branches(struct.versions, self.message.flexible)
            if len(branches) == 1:
                self.write_body(struct, branches[0][0], branches[0][1], out)
            else:
                (flex_versions, _), (classic_versions, _) = branches
                with out.block(f"if version >= {flex_versions.lo}:"):
                    self.write_body(struct, flex_versions, True, out)
                with out.block("else:"):
                    self.write_body(struct, classic_versions, False, out)

    def write_body(self, struct, within, flexible, out, obj="self"):
        start = len(out.lines)
        regular = [f for f in struct.fields
                   if not (f.versions & within).empty and not self.is_tagged(f, within, flexible)]
        runs = self.groups(regular, within)
        fusable = [(group[0].type in FIXED and not group[0].is_array)
                   or self.packable_array(group[0], within) for _, group in runs]
        i = 0
        while i < len(runs):
            cond, group = runs[i]
            # Fixed-width fields and never-null fixed-width arrays that follow each other under
            # one condition are written with one pack (Metadata partitions: 4 fields, 3 arrays).
            j = i + 1
            if fusable[i]:
                while j < len(runs) and fusable[j] and runs[j][0] == cond:
                    j += 1
            fused = runs[i:j]
            i = j
            ctx = out.block(f"if {cond}:") if cond else _Nothing()
            with ctx:
                if fusable[i - 1]:
                    self.write_fused([g for _, g in fused], within, flexible, obj, out)
                else:
                    f = group[0]
                    self.write_value(f, f"{obj}.{f.attr}", within, flexible, "buf", out)
        if flexible:
            tagged = sorted((f for f in struct.fields
                             if not (f.versions & within).empty and self.is_tagged(f, within, flexible)),
                            key=lambda f: f.tag)
            if not tagged:
                with out.block(f"if {obj}.unknown_tagged_fields:"):
                    out(f"write_tags(buf, (), {obj}.unknown_tagged_fields)")
                with out.block("else:"):
                    out("buf.append(0)")
            else:
                out("tagged = []")
                for f in tagged:
                    cond = condition(f.versions, within)
                    default = self.default_expr(f)
                    if default.endswith("()"):
                        test = f"not {obj}.{f.attr}._is_default()"
                    else:
                        test = f"{obj}.{f.attr} != {default}"
                    with out.block(f"if {cond + ' and ' if cond else ''}{test}:"):
                        out("tb = bytearray()")
                        self.write_value(f, f"{obj}.{f.attr}", within, True, "tb", out)
                        out(f"tagged.append(({f.tag}, tb))")
                with out.block(f"if tagged or {obj}.unknown_tagged_fields:"):
                    out(f"write_tags(buf, tagged, {obj}.unknown_tagged_fields)")
                with out.block("else:"):
                    out("buf.append(0)")
        if len(out.lines) == start:
            out("pass")

    def write_fused(self, groups, within, flexible, obj, out):
        fields = [f for g in groups for f in g]
        arrays = [f for f in fields if f.is_array]
        compact = flexible
        if not arrays:
            codes = "".join(FIXED[f.type][0] for f in fields)
            args = ", ".join(f"{obj}.{f.attr}" for f in fields)
            out(f"buf += {self.fmt(codes)}.pack({args})")
            return
        if len(arrays) == 1 and fields[-1] is arrays[0]:
            codes = "".join(FIXED[f.type][0] for f in fields[:-1])
            args = "".join(f"{obj}.{f.attr}, " for f in fields[:-1])
            table = self.array_table(FIXED[arrays[0].type][0], compact, codes)
            out(f"items = {obj}.{arrays[0].attr}")
            out("n = len(items)")
            out(f"buf += {table}[n].pack({args}n{' + 1' if compact else ''}, *items)")
            return
        layout = "".join(f"[{FIXED[f.type][0]}]" if f.is_array else FIXED[f.type][0] for f in fields)
        table = self.multi_table(layout, compact)
        names = {}
        for k, f in enumerate(arrays):
            names[f.attr] = (f"a{k}", f"n{k}")
            out(f"a{k} = {obj}.{f.attr}")
            out(f"n{k} = len(a{k})")
        args = []
        for f in fields:
            if f.is_array:
                a, n = names[f.attr]
                args += [f"{n}{' + 1' if compact else ''}", f"*{a}"]
            else:
                args.append(f"{obj}.{f.attr}")
        key = ", ".join(n for _, n in names.values()) + ("," if len(arrays) == 1 else "")
        out(f"buf += {table}[{key}].pack({', '.join(args)})")

    @staticmethod
    def packable_array(f, within):
        """A fixed-width array that is never null in these versions."""
        return (f.is_array and f.type in FIXED and f.compact is None
                and condition(f.nullable & f.versions, f.versions & within) == "False")

    def is_leaf(self, struct, within, flexible):
        for f in struct.fields:
            if (f.versions & within).empty:
                continue
            if f.is_struct or self.is_tagged(f, within, flexible) or f.compact is not None:
                return False
        return True

    def groups(self, fields, within):
        """Splits fields into runs: adjacent fixed-width scalars under one condition share a run."""
        runs = []
        for f in fields:
            cond = condition(f.versions, within)
            fixed = f.type in FIXED and not f.is_array
            if fixed and runs and runs[-1][2] and runs[-1][0] == cond:
                runs[-1][1].append(f)
            else:
                runs.append((cond, [f], fixed))
        return [(cond, group) for cond, group, _ in runs]

    def write_value(self, f, expr, within, flexible, buf, out):
        compact = self.compact(f, flexible)
        c = "compact_" if compact else ""
        nullable = condition(f.nullable & f.versions, f.versions & within)   # None = always, "False" = never
        if f.is_array:
            if f.type in FIXED:
                code = FIXED[f.type][0]
                table = self.array_table(code, compact)
                out(f"items = {expr}")
                guard = nullable != "False"
                if guard:
                    out("if items is None:")
                    out(f"    {buf}{'.append(0)' if compact else ' += NULL_ARRAY'}")
                    out("else:")
                    out.level += 1
                out("n = len(items)")
                out(f"{buf} += {table}[n].pack(n{' + 1' if compact else ''}, *items)")
                if guard:
                    out.level -= 1
                return
            out(f"items = {expr}")
            out(f"write_{c}array_length({buf}, items)")
            guard = out.block("if items is not None:") if nullable != "False" else _Nothing()
            with guard:
                if f.is_struct and buf == "buf" and self.is_leaf(f.struct, f.versions & within, flexible):
                    # A struct without nested structs or tagged fields is written inline: no
                    # call per element (Metadata partitions, Produce/Fetch partitions...).
                    with out.block("for elem in items:"):
                        self.write_body(f.struct, f.versions & within, flexible, out, obj="elem")
                elif f.is_struct:
                    out(f"write = {self.cls_ref(f.struct)}._write")
                    with out.block("for item in items:"):
                        out(f"write(item, {buf}, pieces, version)")
                else:
                    with out.block("for item in items:"):
                        self.write_scalar(f.type, "item", c, buf, out)
            return
        if f.is_struct:
            if nullable == "False":
                out(f"{expr}._write({buf}, pieces, version)")
                return
            ctx = out.block(f"if {nullable}:") if nullable else _Nothing()
            with ctx:
                with out.block(f"if {expr} is None:"):
                    out(f"{buf}.append(255)")
                with out.block("else:"):
                    out(f"{buf}.append(1)")
                    out(f"{expr}._write({buf}, pieces, version)")
            if nullable:
                with out.block("else:"):
                    out(f"{expr}._write({buf}, pieces, version)")
            return
        self.write_scalar(f.type, expr, c, buf, out)

    def write_scalar(self, ftype, expr, c, buf, out):
        if ftype in FIXED:
            out(f"{buf} += {self.fmt(FIXED[ftype][0])}.pack({expr})")
        elif ftype == "uuid":
            out(f"{buf} += {expr}.bytes")
        elif ftype in ("string", "bytes"):
            out(f"write_{c}{ftype}({buf}, {expr})")
        elif ftype == "records":
            out(f"write_{c}records({buf}, pieces, {expr})")
        else:
            raise ValueError(ftype)

    # --- decode ----------------------------------------------------------------------------

    def emit_read(self, struct, out):
        out("@classmethod")
        out("def _read(cls, data, pos, version):")
        with _Indent(out):
            out("self = _new(cls)")
            out("f = None")
            out("idx = None")
            out("sub = None")
            with out.block("try:"):
                branches = self.branches(struct.versions, self.message.flexible)
                if len(branches) == 1:
                    self.read_body(struct, branches[0][0], branches[0][1], out)
                else:
                    (flex_versions, _), (classic_versions, _) = branches
                    with out.block(f"if version >= {flex_versions.lo}:"):
                        self.read_body(struct, flex_versions, True, out)
                    with out.block("else:"):
                        self.read_body(struct, classic_versions, False, out)
            with out.block("except ProtocolError as exc:"):
                out("raise located(exc, f, idx, pos, sub)")
            with out.block("except DECODE_ERRORS as exc:"):
                out("raise wrapped(exc, f, pos) from None")
            out("return self, pos")

    def read_body(self, struct, within, flexible, out, obj="self", fvar="f"):
        present = [f for f in struct.fields if not (f.versions & within).empty]
        absent = [f for f in struct.fields if (f.versions & within).empty]
        regular = [f for f in present if not self.is_tagged(f, within, flexible)]
        tagged = sorted((f for f in present if self.is_tagged(f, within, flexible)),
                        key=lambda f: f.tag)
        for f in absent:
            out(f"{obj}.{f.attr} = {self.default_expr(f)}")
        for cond, group in self.groups(regular, within):
            ctx = out.block(f"if {cond}:") if cond else _Nothing()
            with ctx:
                out(f"{fvar} = {group[0].attr!r}")
                if group[0].type in FIXED and not group[0].is_array:
                    codes = "".join(FIXED[f.type][0] for f in group)
                    size = sum(FIXED[f.type][1] for f in group)
                    targets = ", ".join(f"{obj}.{f.attr}" for f in group)
                    unpack = f"{self.fmt(codes)}.unpack_from(data, pos)"
                    out(f"{targets}{',' if len(group) == 1 else ''} = {unpack}")
                    out(f"pos += {size}")
                else:
                    self.read_value(group[0], f"{obj}.{group[0].attr}", within, flexible, out)
            if cond:
                with out.block("else:"):
                    for f in group:
                        out(f"{obj}.{f.attr} = {self.default_expr(f)}")
        if not flexible:
            out(f"{obj}.unknown_tagged_fields = None")
            return
        out(f'{fvar} = "<tagged fields>"')
        if not tagged:
            with out.block("if data[pos] == 0:"):
                out(f"{obj}.unknown_tagged_fields = None")
                out("pos += 1")
            with out.block("else:"):
                out(f"{obj}.unknown_tagged_fields, pos = read_unknown_tags(data, pos)")
            return
        for f in tagged:
            out(f"{obj}.{f.attr} = {self.default_expr(f)}")
        out(f"{obj}.unknown_tagged_fields = None")
        out("ntags, pos = read_uvarint(data, pos)")
        with out.block("for _ in range(ntags):"):
            out("tag, size, pos = read_tag_header(data, pos)")
            out("end = pos + size")
            keyword = "if"
            for f in tagged:
                cond = condition(f.versions, within)
                with out.block(f"{keyword} tag == {f.tag}{' and ' + cond if cond else ''}:"):
                    out(f"{fvar} = {f.attr!r}")
                    self.read_value(f, f"{obj}.{f.attr}", within, True, out)
                    with out.block("if pos > end:"):
                        out("raise tag_overrun(pos, end)")
                keyword = "elif"
            with out.block("else:"):
                with out.block(f"if {obj}.unknown_tagged_fields is None:"):
                    out(f"{obj}.unknown_tagged_fields = {{}}")
                out(f"{obj}.unknown_tagged_fields[tag] = bytes(data[pos:end])")
            out("pos = end")

    def read_value(self, f, target, within, flexible, out):
        compact = self.compact(f, flexible)
        c = "compact_" if compact else ""
        nullable = condition(f.nullable & f.versions, f.versions & within)
        if f.is_array:
            if compact:
                # Counts below 127 (one varint byte) inline; the call handles the rest.
                out("n = data[pos] - 1")
                with out.block("if 0 <= n < 127:"):
                    out("pos += 1")
                with out.block("else:"):
                    out("n, pos = read_compact_array_length(data, pos)")
            else:
                out("n, pos = read_array_length(data, pos)")
            with out.block("if n < 0:"):
                if nullable == "False":
                    out("raise null_array()")
                else:
                    if nullable:
                        with out.block(f"if not ({nullable}):"):
                            out("raise null_array()")
                    out(f"{target} = None")
            with out.block("else:"):
                if f.type in FIXED:
                    code, size = FIXED[f.type]
                    out(f"{target}, pos = read_fixed_array(data, pos, n, {code!r}, {size})")
                    return
                if f.is_struct and self.is_leaf(f.struct, f.versions & within, flexible):
                    # Leaf structs are read inline (no call per element); `sub` names the
                    # element's field for error paths like "partition_data[1].records".
                    out("elems = []")
                    out(f"elem_cls = {self.cls_ref(f.struct)}")
                    with out.block("for idx in range(n):"):
                        out("elem = _new(elem_cls)")
                        self.read_body(f.struct, f.versions & within, flexible, out,
                                       obj="elem", fvar="sub")
                        out("elems.append(elem)")
                    out("idx = None")
                    out("sub = None")
                    out(f"{target} = elems")
                    return
                out("items = []")
                if f.is_struct:
                    out(f"read = {self.cls_ref(f.struct)}._read")
                    with out.block("for idx in range(n):"):
                        out("item, pos = read(data, pos, version)")
                        out("items.append(item)")
                    out("idx = None")
                else:
                    with out.block("for _ in range(n):"):
                        self.read_scalar(f.type, "item", c, "False", out)
                        out("items.append(item)")
                out(f"{target} = items")
            return
        if f.is_struct:
            ref = self.cls_ref(f.struct)
            if nullable == "False":
                out(f"{target}, pos = {ref}._read(data, pos, version)")
                return
            test = "data[pos] >= 128" if nullable is None else f"({nullable}) and data[pos] >= 128"
            with out.block(f"if {test}:"):
                out(f"{target} = None")
                out("pos += 1")
            with out.block("else:"):
                if nullable is None:
                    out("pos += 1")
                else:
                    with out.block(f"if {nullable}:"):
                        out("pos += 1")
                out(f"{target}, pos = {ref}._read(data, pos, version)")
            return
        self.read_scalar(f.type, target, c, nullable, out)

    def read_scalar(self, ftype, target, c, nullable, out):
        if ftype in FIXED:
            code, size = FIXED[ftype]
            out(f"{target} = {self.fmt(code)}.unpack_from(data, pos)[0]")
            out(f"pos += {size}")
        elif ftype == "uuid":
            out(f"{target}, pos = read_uuid(data, pos)")
        elif ftype == "records":
            # Inlined (the Produce hot path): the length, then a view of the frame — no copy.
            # `pos` moves only on success, so an error reports the field's start offset.
            if c:
                out("size = data[pos]")
                with out.block("if size < 128:"):
                    out("start = pos + 1")
                with out.block("else:"):
                    # 2- and 3-byte lengths (frames up to 2 MiB) unrolled here: a call to
                    # read_uvarint per partition was a measurable share of a Produce decode.
                    out("b1 = data[pos + 1]")
                    with out.block("if b1 < 128:"):
                        out("size = (size & 127) | (b1 << 7)")
                        out("start = pos + 2")
                    with out.block("else:"):
                        out("b2 = data[pos + 2]")
                        with out.block("if b2 < 128:"):
                            out("size = (size & 127) | ((b1 & 127) << 7) | (b2 << 14)")
                            out("start = pos + 3")
                        with out.block("else:"):
                            out("size, start = read_uvarint(data, pos)")
                out("size -= 1")
            else:
                out(f"size = {self.fmt('i')}.unpack_from(data, pos)[0]")
                out("start = pos + 4")
            with out.block("if size < 0:"):
                out(f"{target} = None")
                out("pos = start")
            with out.block("else:"):
                out("end = start + size")
                with out.block("if end > len(data):"):
                    out("raise past_end(data, start, size)")
                out(f"{target} = data[start:end]")
                out("pos = end")
        elif ftype == "string" and c and nullable in ("False", None):
            # Compact strings shorter than 127 bytes (names, ids) inline; the call handles
            # longer ones and reports bad lengths.
            out("n = data[pos]")
            keyword = "if"
            if nullable is None:
                with out.block("if n == 0:"):
                    out(f"{target} = None")
                    out("pos += 1")
                keyword = "elif"
            cond = "n < 128" if nullable is None else "0 < n < 128"
            with out.block(f"{keyword} {cond} and (s_end := pos + n) <= len(data):"):
                out(f'{target} = str(data[pos + 1:s_end], "utf-8", "replace")')
                out("pos = s_end")
            with out.block("else:"):
                out(f"{target}, pos = read_compact_{'' if nullable == 'False' else 'nullable_'}string(data, pos)")
        elif ftype in ("string", "bytes"):
            if nullable == "False":
                out(f"{target}, pos = read_{c}{ftype}(data, pos)")
            elif nullable is None:
                out(f"{target}, pos = read_{c}nullable_{ftype}(data, pos)")
            else:
                with out.block(f"if {nullable}:"):
                    out(f"{target}, pos = read_{c}nullable_{ftype}(data, pos)")
                with out.block("else:"):
                    out(f"{target}, pos = read_{c}{ftype}(data, pos)")
        else:
            raise ValueError(ftype)


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
