"""The LLM-SQL front end: SQL text with `LLM('template', col, ...)` calls -> `LLMQuery`.

`compiler.compile_sql` is the entry (it documents the language); `clauses` holds the clause
handlers, `shape` the clauses that run after the LLM calls, `outputs` what an LLM call answers,
`nodes` the node vocabulary over sqlglot trees and `syntax` names and the SQL built from them.
"""
