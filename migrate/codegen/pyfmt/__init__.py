"""Print a small Python syntax tree as source text that ``ruff format`` leaves unchanged.

The migrator builds its output as a tree of the nodes below (calls, literals, assignments,
functions, dataclasses) and :func:`format_module` prints it. The printed text is already what
``ruff format`` (line length 100) produces, and its imports are sorted the way ruff's isort rule
(``I001``) wants, so the generated files pass ``ruff format --check`` and ``ruff check``. ruff is
never run: the layout rules are reproduced here. They were found by running ruff 0.17 on
candidate code; ``tests/test_pyfmt.py`` checks them against ruff on hundreds of random trees.

Literals are produced from values, never pasted: :class:`Lit` escapes every string, so a hostile
string comes back as exactly the same string when the code runs and executes nothing. Comment
texts are escaped too and can never end the comment early.

**Expressions** (``Lit``, ``Ref``, ``Call``, ``ListExpr``, ``TupleExpr``, ``DictExpr``,
``Lambda``). An expression is printed on one line when the whole line fits (indentation, what
comes before it, the expression, and what follows it up to the line end: a comma, a closing
bracket, a trailing comment) and no comment is inside it. Otherwise its brackets split:

- call arguments first try to sit together on one indented line between the brackets; when that
  does not fit either, or a comment is inside, there is one argument per line;
- list, tuple and dict literals always go to one item per line when they split;
- one item per line gets a trailing comma after the last item, except when there is a single
  item (ruff never adds a comma there; a one-element tuple keeps the comma it needs);
- each item is laid out by the same rules with what follows it (its comma and trailing
  comment) counted on its last line, so nested brackets split from the outside in;
- a trailing comment counts with its width plus two spaces, a pragma comment (``noqa``,
  ``type:``...) counts zero, exactly like ruff's reserved width for line-suffix comments;
- names, literals and empty brackets cannot split and simply run past the limit;
- a lambda body that does not fit splits in its own brackets when it is a list, tuple or dict,
  or a call whose ``lambda: f(`` line fits; any other body is wrapped in parentheses.

**Statements whose value does not fit** (``x = value``, ``return value``, ``x: T = value``).
ruff may wrap the value in parentheses:

- a call with arguments splits its own brackets when the first line (``x = Foo(``) fits;
  otherwise it is wrapped in parentheses if every line of the wrapped layout fits, else it is
  split without parentheses all the same (Black's "prefer splitting the right hand side");
- lists, tuples and dicts never get parentheses;
- a lambda value must start on a line that fits (``ValueError`` otherwise: ruff's layout there
  is not reproduced; lambdas are meant as ``default_factory=lambda: [...]`` arguments);
- anything that cannot split (a name, a literal, ``a.b``, ``Foo()``) gets parentheses when
  ``x = (``, the value line and ``)`` all fit, and stays on one long line otherwise. A trailing
  comment of the statement moves inside the parentheses after a name, string, number, bool or
  ``None`` (ruff "inlines" it there) and stays after ``)`` for everything else;
- an annotation that can split (``list[str]``, ``Literal[...]``, ``int | None``) makes ruff
  prefer parenthesizing the value whenever ``x: T = (`` fits. Annotations are printed verbatim
  and never split: a field whose annotation would have to split raises ``ValueError``.

**Blank lines**: one after the module docstring, one between import groups, two around
top-level functions and classes (and before the comments that lead them), one around nested
ones, one after a class docstring, none elsewhere (a field's attribute docstring follows the
field directly, and so does the next field).

**Imports**: ``from m import a, b`` stays on one line when it fits, else one name per line in
parentheses with a trailing comma. :func:`sort_imports` orders them like ruff's isort.

The package's modules: ``nodes`` (the tree), ``text`` (widths, literals, comments), ``layout``
(expressions and statement values), ``docstrings``, ``imports`` (lines and isort order) and
``printer`` (statements, blank lines, :func:`~titan.migrate.codegen.pyfmt.printer.format_module`).
"""
