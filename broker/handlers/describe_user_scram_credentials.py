"""DescribeUserScramCredentials (api key 50), version 0 (KIP-554).

This broker has no SASL/SCRAM, so no user has a credential. The API is served so that admin tools
which ask for credentials while describing users (Apache Kafka's kafka-configs.sh --describe
--entity-type users) get Kafka's answer for a user without one instead of an unsupported API:
- users null or empty (describe all): no results;
- each named user: RESOURCE_NOT_FOUND "Attempt to describe a user credential that does not exist:
  <user>"; a user named twice: DUPLICATE_RESOURCE "Cannot describe SCRAM credentials for the same
  user twice in a single request: <user>" (once per user, in request order), as Kafka.
"""
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.messages.describe_user_scram_credentials import DescribeUserScramCredentialsResponse

API_KEY = ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS
MIN_VERSION = 0
MAX_VERSION = 0

R = DescribeUserScramCredentialsResponse


async def handle(broker, ctx, request):
    names = [u.name for u in request.users or []]
    results = []
    for name in dict.fromkeys(names):
        if names.count(name) > 1:
            code, message = (ErrorCode.DUPLICATE_RESOURCE, "Cannot describe SCRAM credentials for "
                             f"the same user twice in a single request: {name}")
        else:
            code, message = (ErrorCode.RESOURCE_NOT_FOUND,
                             f"Attempt to describe a user credential that does not exist: {name}")
        results.append(R.DescribeUserScramCredentialsResult(
            user=name, error_code=int(code), error_message=message, credential_infos=[]))
    return R(throttle_time_ms=0, error_code=0, error_message=None, results=results)
