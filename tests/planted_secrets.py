"""Connection strings with a planted secret, in the spellings users get wrong: the
ones the parser refuses (with what its one line says) and the ones it accepts, each with
the secret where it must be masked. The location's own tests and every command's
(tests/runner/cli/test_secrets.py) use them."""

from __future__ import annotations

#: The planted secret (base64, with the '=' padding a value may carry): it must appear
#: in no output, log line or page.
PLANTED = "UGxhbnRlZFNlY3JldDQy"
SECRET = f"{PLANTED}=="

#: Spellings refused at parse time, with what the one line says.
REFUSED = [
    (f"DefaultEndpointsProtocol=https;AccountName=myacct;AccountKy={SECRET}", "'AccountKy'"),
    (f"AccountName=myacct;SharedAccessSignatur=sv=1&sig={SECRET}", "'SharedAccessSignatur'"),
    (f"AccountName=myacct;Account Key={SECRET}", "'Account Key'"),
    (f"AccountName=myacct;accountkye={SECRET};", "'accountkye'"),
    (f"AccountName=myacct;Password={SECRET}", "'Password'"),
    (f"AccountName=myacct;AccountKey:{SECRET}", "not shown"),
    (f"AccountName=myacct;{SECRET};", "not shown"),
    (f"AccountName=myacct;{PLANTED};", "not Key=value"),
    (f"AccountName=myacct;AccountKey=x;accountkey={SECRET}", "AccountKey appears twice"),
    (f"AccountKy={SECRET}", "'AccountKy'"),
    (f"AccountKey={SECRET}", "no AccountName"),
    (f"DefaultEndpointsProtocol=https;AccountKy={SECRET}", "'AccountKy'"),
    (f"AccountName=myacct;BlobEndpoint={SECRET}", "BlobEndpoint is not an http(s) URL"),
    (f"AccountName=myacct,AccountKey={SECRET}", "AccountName is not an account name"),
    (f"AccountName=myacct;EndpointSuffix={SECRET}", "EndpointSuffix is not a host name"),
    (f"AccountName=myacct;DefaultEndpointsProtocol={SECRET}", "http or https"),
    (f"UseDevelopmentStorage={SECRET}", "UseDevelopmentStorage is not true"),
    (f"AccountName=myacct;AccountKey= ;BlobEndpoint={SECRET}", "empty AccountKey"),
]
#: Spellings accepted, each with the secret in a place that must be masked.
ACCEPTED = [
    f"DefaultEndpointsProtocol=https;AccountName=myacct;AccountKey={SECRET};"
    "EndpointSuffix=core.windows.net",
    f"defaultendpointsprotocol=HTTPS;accountname=myacct;accountkey={SECRET}",
    f"ACCOUNTNAME=myacct;ACCOUNTKEY={SECRET};;;",
    f" AccountName = myacct ; AccountKey = {SECRET} ; ",
    f"AccountName=myacct;SharedAccessSignature=sv=2024-01-01&sig={SECRET}",
    f"AccountName=myacct;SharedAccessSignature=?sv=2024-01-01&sig={SECRET}",
    f"AccountName=myacct;BlobEndpoint=https://myacct.blob.core.windows.net/?sv=1&sig={SECRET}",
    f"AccountName=myacct;QueueEndpoint=https://u:{SECRET}@127.0.0.1:9/myacct",
    f"UseDevelopmentStorage=true;DevelopmentStorageProxyUri=http://127.0.0.1/?k={SECRET}",
    f"AccountName=myacct;TableSecondaryEndpoint=https://h/#{SECRET};AccountKey={SECRET}",
]
