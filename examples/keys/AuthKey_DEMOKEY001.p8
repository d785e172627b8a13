Throw-away demo key for examples/rules/herald.{hcl,yaml} (not an Apple key): use the .p8 from your Apple developer account.
-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgQdxIZsxnM3SyQZlI
Q7gGPdxdahr7fREWCGzX5EKl+lihRANCAATCsF3hfHUgBX2b1/YghVUdCEIjAZh4
5NwRS30lcAkJ0HzVINYxgMPI2JMA/Sj2MmjqGixqqdU+pS6W+5/Y8PJw
-----END PRIVATE KEY-----
