module listwatch.local/handover-bench

go 1.22
