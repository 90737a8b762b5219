BlossJ
L˜?