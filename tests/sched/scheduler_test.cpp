int w;
