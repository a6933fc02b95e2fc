module listwatch.local/listwatch

go 1.22
