"""The MCP gateway (`signoff mcp`): an MCP server in front of upstream MCP servers that runs
every tool call through Signoff's approvals and once-per-run ledger, so any MCP client's calls
get them with no adapter of its own.

```
config      the TOML file: upstreams, each tool's effect and approval policy
upstreams   one mcp.Client per upstream; the catalog of routes (exposed name -> tool, spec)
calls       Gateway.call_tool: run and call ids, approval rounds (both protocol revisions),
            the ledger's run or replay, the answer
asking      the elicitations: URL mode (four-eyes, the inbox), form mode (self-confirm)
request_state   the sealed requestState (the SDK's boundary over Signoff's key ring)
auth        bearer tokens over HTTP: agent tokens and OIDC, as `signoff serve` checks them
server, running   the SDK's lowlevel Server, served over stdio or Streamable HTTP
```
"""
