#!/bin/bash
# Start script of the chat function. The Lambda Web Adapter (AWS_LAMBDA_EXEC_WRAPPER=/opt/bootstrap)
# runs it instead of a Python handler, waits for GET $AWS_LWA_READINESS_CHECK_PATH to answer, then
# forwards each Function URL request to this server and streams its response back.
# The code is in $LAMBDA_TASK_ROOT; the library and its dependencies come from the layer (/opt/python).
# serve.py serves app.py's app on 127.0.0.1:$AWS_LWA_PORT (lambda_fastpath.httpd).
export PYTHONPATH="${LAMBDA_TASK_ROOT:-.}:/opt/python${PYTHONPATH:+:$PYTHONPATH}"
exec python -m serve
