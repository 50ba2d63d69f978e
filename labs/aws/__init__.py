"""The AWS side of a lab: boto3 calls, the terraform adapter, prices and the stack contract."""
